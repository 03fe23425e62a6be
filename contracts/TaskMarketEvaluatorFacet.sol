// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TaskMarketBase} from "./TaskMarketBase.sol";

/// The ERC-8195 evaluator flow of the devnet diamond: assign, evaluate, appeal, finalize,
/// resolve, time out. finalizeVerdict is permissionless; evaluatorTimeout is
/// requester-only through a trusted forwarder, so a keeper gets NotTrustedForwarder.
///
/// Deadlines (no getter, as upstream): evaluation = TaskSubmitted block + evaluationWindow;
/// appeal = TaskEvaluated block + appealWindow (at least 300 s). evaluate raises
/// expiryTime to at least the appeal deadline.
contract TaskMarketEvaluatorFacet is TaskMarketBase {
    function assignEvaluator(
        bytes32 taskId,
        address evaluator,
        uint256 stakeAmount,
        uint16 feeBps,
        uint32 evaluationWindowSecs,
        uint32 appealWindowSecs,
        address disputeResolver
    ) external {
        AppStorage storage s = _s();
        _requireForwarder(s);
        _requireNotPaused(s);
        address requester = _sender(s);
        Task storage t = s.tasks[taskId];
        if (requester != t.requester) revert NotRequester();
        if (t.status != TaskStatus.Open) revert TaskNotOpen();
        _applyEvaluatorConfig(
            s,
            taskId,
            requester,
            TaskEvaluatorConfig(
                evaluator,
                stakeAmount,
                feeBps,
                evaluationWindowSecs,
                appealWindowSecs,
                disputeResolver
            )
        );
    }

    function evaluate(
        bytes32 taskId,
        VerdictType verdictType,
        uint16 score,
        uint16 confidence,
        bytes32 evidenceHash,
        Award[] calldata awards
    ) external {
        AppStorage storage s = _s();
        _requireForwarder(s);
        _requireNotPaused(s);
        Task storage t = s.tasks[taskId];
        TaskEvaluatorConfig storage c = s.evalConfigs[taskId];
        if (_sender(s) != c.evaluator || c.evaluator == address(0)) revert NotEvaluator();
        bool contestOpen = _contest(t.mode)
            && (t.status == TaskStatus.Open || t.status == TaskStatus.PendingApproval);
        if (t.status != TaskStatus.Review && !contestOpen) revert WrongStatusForEvaluation();
        _checkAwards(s, t, taskId, awards);
        Verdict storage v = s.verdicts[taskId];
        v.issued = true;
        v.verdictType = verdictType;
        v.score = score;
        v.confidence = confidence;
        v.evidenceHash = evidenceHash;
        _storeAwards(v, awards);
        // revision 21: a zero award names no recipient; the first paid one is the worker
        if (_contest(t.mode)) {
            address paid = _firstPaid(v.awards);
            if (paid != address(0)) t.worker = paid;
        }
        _openAppeal(s, t, taskId, uint8(verdictType), score);
    }

    /// Appealing until now + appealWindow; the evaluator gets its fee and its stake back.
    function _openAppeal(
        AppStorage storage s,
        Task storage t,
        bytes32 taskId,
        uint8 verdictType,
        uint16 score
    ) private {
        TaskEvaluatorConfig storage c = s.evalConfigs[taskId];
        uint256 fee = (t.reward * c.evaluatorFeeBps) / BPS;
        uint256 stakeBack = c.evaluatorStake;
        c.evaluatorStake = 0;
        s.evalFeePaid[taskId] = fee;
        uint256 deadline = block.timestamp + c.appealWindow;
        s.phaseDeadline[taskId] = deadline;
        _raiseExpiry(t, deadline);
        t.status = TaskStatus.Appealing;
        emit TaskEvaluated(taskId, c.evaluator, verdictType, score);
        _pay(s, c.evaluator, fee + stakeBack);
    }

    function appeal(bytes32 taskId) external {
        AppStorage storage s = _s();
        _requireForwarder(s);
        _requireNotPaused(s);
        address worker = _sender(s);
        Task storage t = s.tasks[taskId];
        bool allowed = worker == t.worker && worker != address(0);
        if (!allowed && t.worker == address(0) && _contest(t.mode)) {
            allowed = s.submissionCount[taskId][worker] > 0;
        }
        if (!allowed) revert NotWorker();
        if (t.status != TaskStatus.Appealing) revert NotInAppealingState();
        if (block.timestamp >= s.phaseDeadline[taskId]) revert AppealWindowClosed();
        t.status = TaskStatus.Disputed;
        emit TaskAppealed(taskId, worker);
        address resolver = s.evalConfigs[taskId].disputeResolver;
        if (resolver != address(0)) emit TaskDisputed(taskId, resolver);
    }

    /// Permissionless: the keeper's action once the appeal window has closed.
    function finalizeVerdict(bytes32 taskId) external {
        AppStorage storage s = _s();
        _requireNotPaused(s);
        Task storage t = s.tasks[taskId];
        if (t.status != TaskStatus.Appealing) revert NotInAppealingState();
        if (block.timestamp < s.phaseDeadline[taskId]) revert AppealWindowStillOpen();
        Verdict storage v = s.verdicts[taskId];
        if (!v.issued) revert NoVerdictIssued();
        if (v.verdictType == VerdictType.REJECT) {
            uint256 refund = t.reward - s.evalFeePaid[taskId];
            t.reward = 0;
            t.status = TaskStatus.Cancelled;
            t.worker = address(0);
            t.deliverable = bytes32(0);
            _pay(s, t.requester, refund);
            emit TaskCancelled(taskId, t.requester, refund);
            return;
        }
        _settle(s, t, taskId, v.awards);
    }

    function resolveDispute(bytes32 taskId, VerdictType verdictType, Award[] calldata awards)
        external
    {
        AppStorage storage s = _s();
        _requireNotPaused(s);
        Task storage t = s.tasks[taskId];
        if (t.status != TaskStatus.Disputed) revert NotInDisputedState();
        if (_sender(s) != s.evalConfigs[taskId].disputeResolver) revert NotDisputeResolver();
        if (verdictType == VerdictType.REJECT) revert DisputeResolutionMustAwardWorkers();
        if (awards.length == 0) revert AwardsRequired();
        _checkAwards(s, t, taskId, awards);
        Verdict storage v = s.verdicts[taskId];
        v.verdictType = verdictType;
        _storeAwards(v, awards);
        _settle(s, t, taskId, v.awards);
    }

    /// Requester-only, through a trusted forwarder: the evaluator missed its window.
    function evaluatorTimeout(bytes32 taskId) external {
        AppStorage storage s = _s();
        _requireForwarder(s);
        _requireNotPaused(s);
        Task storage t = s.tasks[taskId];
        if (_sender(s) != t.requester) revert NotRequester();
        if (t.status != TaskStatus.Review) revert NotInReviewState();
        if (block.timestamp <= s.phaseDeadline[taskId]) revert EvaluationWindowNotExpired();
        TaskEvaluatorConfig storage c = s.evalConfigs[taskId];
        address evaluator = c.evaluator;
        uint256 forfeited = c.evaluatorStake;
        c.evaluatorStake = 0;
        c.evaluator = address(0);
        t.status = TaskStatus.PendingApproval;
        _pay(s, s.feeRecipient, forfeited);
        emit EvaluatorTimedOut(taskId, evaluator, forfeited);
    }

    function _checkAwards(
        AppStorage storage s,
        Task storage t,
        bytes32 taskId,
        Award[] calldata awards
    ) private view {
        uint256 total;
        for (uint256 i = 0; i < awards.length; ++i) {
            total += awards[i].amount;
            if (awards[i].amount == 0) continue;
            address worker = awards[i].worker;
            if (worker == address(0)) revert InvalidAwardRecipient();
            if (_contest(t.mode)) {
                if (s.submissionCount[taskId][worker] == 0) revert SubmissionNotFound();
            } else if (worker != t.worker) {
                revert WorkerMismatch();
            }
        }
        uint256 fee = (t.reward * s.evalConfigs[taskId].evaluatorFeeBps) / BPS;
        if (total > t.reward - fee) revert AwardsExceedEscrow();
    }

    function _firstPaid(Award[] storage awards) private view returns (address) {
        for (uint256 i = 0; i < awards.length; ++i) {
            if (awards[i].amount != 0) return awards[i].worker;
        }
        return address(0);
    }

    function _storeAwards(Verdict storage v, Award[] calldata awards) private {
        delete v.awards;
        for (uint256 i = 0; i < awards.length; ++i) {
            v.awards.push(awards[i]);
        }
    }

    /// Pay every award (one TaskCompleted each); the unawarded rest goes back silently.
    function _settle(AppStorage storage s, Task storage t, bytes32 taskId, Award[] storage awards)
        private
    {
        uint256 rest = t.reward - s.evalFeePaid[taskId];
        t.reward = 0;
        t.status = TaskStatus.Accepted;
        // revision 21: a contest's worker is the final verdict's first paid award, none
        // when it pays no one; a claimed, pitched or auctioned task keeps its locked worker
        if (_contest(t.mode)) t.worker = _firstPaid(awards);
        for (uint256 i = 0; i < awards.length; ++i) {
            if (awards[i].amount == 0) continue;
            rest -= awards[i].amount;
            _payWorker(s, t, awards[i].worker, awards[i].amount);
        }
        _pay(s, t.requester, rest);
    }
}
