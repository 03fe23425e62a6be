// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TaskMarketBase} from "./TaskMarketBase.sol";

/// Task lifecycle of the devnet diamond: create, claim, select, submit, reject, accept,
/// cancel, update, refund. Requester and worker calls must come through a trusted
/// forwarder (NotTrustedForwarder otherwise); refundExpired is permissionless.
///
/// Devnet simplifications, silent in the interface: the reward (and any stake) is pulled
/// from the requester with transferFrom instead of being pushed by the forwarder first;
/// Auction mode and hooks are not offered (InvalidMode, InvalidHookAddress).
contract TaskMarketCoreFacet is TaskMarketBase {
    function createTask(
        TaskConfig calldata config,
        StakeConfig calldata stake,
        HookConfig calldata hooks,
        TaskContent calldata content,
        TaskEvaluatorConfig calldata evaluatorConfig
    ) external returns (bytes32 taskId) {
        AppStorage storage s = _s();
        _requireForwarder(s);
        _requireNotPaused(s);
        address requester = _sender(s);
        if (requester == address(0)) revert InvalidRequester();
        if (config.reward == 0) revert RewardMustBeGreaterThanZero();
        if (config.duration == 0) revert DurationMustBeGreaterThanZero();
        bytes4 mode = config.mode;
        if (!(mode == BOUNTY || mode == CLAIM || mode == PITCH || mode == BENCHMARK)) {
            revert InvalidMode();
        }
        if (stake.bps > BPS) revert StakeBpsTooHigh();
        if (hooks.contracts.length != 0) revert InvalidHookAddress();
        content; // stored off chain in this devnet: only its hash would be kept

        taskId = keccak256(
            abi.encode(block.chainid, address(this), requester, s.requesterNonce[requester]++)
        );
        Task storage t = s.tasks[taskId];
        t.id = taskId;
        t.requester = requester;
        t.reward = config.reward;
        t.expiryTime = block.timestamp + config.duration;
        t.mode = mode;
        t.feeBps = s.defaultFeeBps;
        t.stakeRequired = stake.required;
        t.stakeBps = stake.bps;
        _pull(s, requester, config.reward);
        // applied before TaskCreated: on the diamond EvaluatorAssigned comes first
        if (evaluatorConfig.evaluator != address(0)) {
            _applyEvaluatorConfig(s, taskId, requester, evaluatorConfig);
        } else if (
            evaluatorConfig.evaluatorStake != 0 || evaluatorConfig.evaluatorFeeBps != 0
                || evaluatorConfig.evaluationWindow != 0 || evaluatorConfig.appealWindow != 0
                || evaluatorConfig.disputeResolver != address(0)
        ) {
            revert InvalidEvaluator();
        }
        emit TaskCreated(
            taskId, requester, config.reward, mode, t.expiryTime, stake.required, stake.bps
        );
    }

    function claimTask(bytes32 taskId, uint256 stakeAmount) external {
        AppStorage storage s = _s();
        _requireForwarder(s);
        _requireNotPaused(s);
        address worker = _sender(s);
        Task storage t = _existing(s, taskId);
        if (worker == address(0)) revert InvalidWorker();
        if (t.mode != CLAIM) revert NotAClaimTask();
        if (t.status != TaskStatus.Open) revert TaskNotOpen();
        if (block.timestamp > t.expiryTime) revert TaskIsExpired();
        t.worker = worker;
        t.stakeAmount = stakeAmount;
        t.status = TaskStatus.Claimed;
        _pull(s, worker, stakeAmount);
        emit TaskClaimed(taskId, worker, stakeAmount);
    }

    function selectWorker(bytes32 taskId, address worker) external {
        AppStorage storage s = _s();
        _requireForwarder(s);
        _requireNotPaused(s);
        Task storage t = s.tasks[taskId];
        if (_sender(s) != t.requester) revert NotRequester();
        if (t.mode != PITCH) revert NotAPitchTask();
        if (t.status != TaskStatus.Open) revert TaskNotOpen();
        if (block.timestamp > t.expiryTime) revert TaskIsExpired();
        if (worker == address(0)) revert InvalidWorker();
        t.worker = worker;
        t.status = TaskStatus.WorkerSelected;
        emit TaskWorkerSelected(taskId, worker);
    }

    function submitWork(bytes32 taskId, bytes32 deliverable) external {
        AppStorage storage s = _s();
        _requireForwarder(s);
        _requireNotPaused(s);
        address worker = _sender(s);
        Task storage t = _existing(s, taskId);
        if (block.timestamp > t.expiryTime) revert TaskIsExpired();
        if (_contest(t.mode)) {
            // an open contest: the task stays Open and collects submissions
            if (t.status != TaskStatus.Open) revert TaskNotOpen();
            if (s.rejected[taskId][worker]) revert SubmissionAlreadyRejected();
            s.hadSubmissions[taskId] = true;
            s.activeSubmissions[taskId] += 1;
            s.submissionCount[taskId][worker] += 1;
            s.submitted[taskId][worker][deliverable] = true;
        } else {
            bool claimed = t.mode == CLAIM && t.status == TaskStatus.Claimed;
            bool selected = t.mode == PITCH && t.status == TaskStatus.WorkerSelected;
            if (!claimed && !selected) {
                if (t.mode == CLAIM) revert TaskNotClaimed();
                revert WorkerNotSelected();
            }
            if (worker != t.worker) revert WorkerMismatch();
            if (t.deliverable != bytes32(0)) revert DeliverableAlreadySet();
            t.deliverable = deliverable;
            TaskEvaluatorConfig storage c = s.evalConfigs[taskId];
            if (c.evaluator != address(0)) {
                t.status = TaskStatus.Review;
                uint256 deadline = block.timestamp + c.evaluationWindow;
                s.phaseDeadline[taskId] = deadline;
                _raiseExpiry(t, deadline);
            } else {
                t.status = TaskStatus.PendingApproval;
            }
        }
        emit TaskSubmitted(taskId, worker, deliverable);
    }

    function rejectSubmission(bytes32 taskId, address worker) external {
        AppStorage storage s = _s();
        _requireForwarder(s);
        _requireNotPaused(s);
        Task storage t = _existing(s, taskId);
        if (_sender(s) != t.requester) revert NotRequester();
        if (!_contest(t.mode)) revert InvalidMode();
        if (t.status != TaskStatus.Open && t.status != TaskStatus.PendingApproval) {
            revert TaskNotOpen();
        }
        if (s.rejected[taskId][worker]) revert SubmissionAlreadyRejected();
        uint256 active = s.activeSubmissions[taskId];
        if (active == 0) revert NoActiveSubmissions();
        s.rejected[taskId][worker] = true;
        // revision 13's rule: a worker who never submitted frees nothing (before it, a
        // rejection freed at least one, so rejecting any address cleared a live submission)
        uint256 count = s.submissionCount[taskId][worker];
        if (count > 0) {
            s.activeSubmissions[taskId] = active > count ? active - count : 0;
        }
        emit SubmissionRejected(taskId, worker);
    }

    function acceptSubmission(
        bytes32 taskId,
        address worker,
        bytes32 deliverable,
        uint256 requesterAgentId
    ) external {
        AppStorage storage s = _s();
        _requireForwarder(s);
        _requireNotPaused(s);
        Task storage t = _existing(s, taskId);
        if (_sender(s) != t.requester) revert NotRequester();
        requesterAgentId; // reputation feedback is not part of this devnet
        if (_contest(t.mode)) {
            if (t.status != TaskStatus.Open && t.status != TaskStatus.PendingApproval) {
                revert TaskNotOpen();
            }
            if (!s.submitted[taskId][worker][deliverable]) revert SubmissionNotFound();
            t.worker = worker;
            t.deliverable = deliverable;
        } else {
            if (t.status == TaskStatus.Review || t.status == TaskStatus.Appealing) {
                revert UseEvaluate();
            }
            if (t.status != TaskStatus.PendingApproval) revert TaskNotClaimed();
            if (worker != t.worker) revert WorkerMismatch();
            if (deliverable != t.deliverable) revert DeliverableMismatch();
        }
        t.status = TaskStatus.Accepted;
        uint256 amount = t.reward;
        t.reward = 0;
        _payWorker(s, t, worker, amount);
    }

    function cancelTask(bytes32 taskId, uint256 requesterAgentId) external {
        AppStorage storage s = _s();
        _requireForwarder(s);
        _requireNotPaused(s);
        Task storage t = _existing(s, taskId);
        if (_sender(s) != t.requester) revert NotRequester();
        if (t.status != TaskStatus.Open) revert TaskNotOpen();
        if (_contest(t.mode) && s.activeSubmissions[taskId] > 0) revert SubmissionsExist();
        requesterAgentId;
        t.status = TaskStatus.Cancelled;
        uint256 refund = t.reward;
        t.reward = 0;
        _pay(s, t.requester, refund);
        emit TaskCancelled(taskId, t.requester, refund);
    }

    /// Pass 0 to leave a field unchanged; bid and pitch deadlines are accepted and ignored.
    function updateTask(
        bytes32 taskId,
        uint256 newReward,
        uint256 newExpiryTime,
        uint256 newBidDeadline,
        uint256 newPitchDeadline
    ) external {
        AppStorage storage s = _s();
        _requireForwarder(s);
        _requireNotPaused(s);
        Task storage t = _existing(s, taskId);
        if (_sender(s) != t.requester) revert NotRequester();
        if (t.status != TaskStatus.Open) revert TaskNotOpen();
        (newBidDeadline, newPitchDeadline);
        if (newReward != 0 && newReward == t.reward) revert NoRewardChange();
        bool changed;
        if (newReward != 0) {
            if (newReward > t.reward) {
                _pull(s, t.requester, newReward - t.reward);
            } else {
                _pay(s, t.requester, t.reward - newReward);
            }
            t.reward = newReward;
            changed = true;
        }
        if (newExpiryTime != 0) {
            if (newExpiryTime <= block.timestamp) revert ExpiryMustBeInFuture();
            changed = changed || newExpiryTime != t.expiryTime;
            t.expiryTime = newExpiryTime;
        }
        if (changed) emit TaskUpdated(taskId, t.reward, t.expiryTime);
    }

    /// Permissionless once expired. It does not spare Appealing or Disputed tasks (the
    /// refund is the reward minus the evaluator fee already paid): that hazard is the
    /// keeper's to refuse, as on the deployed diamond.
    function refundExpired(bytes32 taskId, uint256 requesterAgentId) external {
        AppStorage storage s = _s();
        _requireNotPaused(s);
        Task storage t = _existing(s, taskId);
        if (block.timestamp <= t.expiryTime) revert TaskNotYetExpired();
        if (t.status == TaskStatus.Accepted) revert TaskAlreadyAccepted();
        if (t.status == TaskStatus.Cancelled) revert TaskIsCancelled();
        if (t.status == TaskStatus.Expired) revert TaskAlreadyRefunded();
        if (_contest(t.mode) && s.activeSubmissions[taskId] > 0) revert SubmissionsExist();
        requesterAgentId;
        t.status = TaskStatus.Expired;
        uint256 refund = t.reward - s.evalFeePaid[taskId];
        t.reward = 0;
        TaskEvaluatorConfig storage c = s.evalConfigs[taskId];
        address evaluator = c.evaluator;
        uint256 forfeited = c.evaluatorStake;
        if (forfeited > 0) {
            c.evaluatorStake = 0;
            c.evaluator = address(0);
        }
        _pay(s, t.requester, refund);
        if (t.mode == CLAIM && t.stakeAmount > 0) {
            _pay(s, t.worker, t.stakeAmount);
            emit StakeReturned(taskId, t.worker, t.stakeAmount);
        }
        if (forfeited > 0) {
            _pay(s, s.feeRecipient, forfeited);
            emit EvaluatorTimedOut(taskId, evaluator, forfeited);
        }
        emit TaskExpired(taskId, t.requester, refund);
        if (_contest(t.mode)) {
            bytes32 what = s.hadSubmissions[taskId]
                ? keccak256("expired_after_rejections")
                : keccak256("expired_no_action");
            emit RequesterReputation(taskId, t.requester, what, refund, 0, false);
        }
    }
}
