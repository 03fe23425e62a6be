// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TokenTransfer} from "./IERC20Minimal.sol";

/// The task market as it was before revision 7 (and TaskCreated before revision 14): the
/// earlier devnet contract, kept so history in these shapes stays decoded and tested.
/// Five-argument TaskCreated, refundExpired(bytes32), caller-chosen task ids, direct
/// msg.sender authorisation instead of a trusted forwarder. The current shape is the
/// TaskMarket diamond.
///
/// Written for the devnet and the tests, not for production. Rules where the interface is
/// silent:
/// - createTask escrows `reward` USDC from the requester; taskId is chosen by the caller,
///   must be non-zero and unused; expiryTime must be in the future.
/// - cancelTask: requester, Open and unclaimed -> Cancelled, full refund.
/// - claimTask: anyone but the requester, Open and not expired (now <= expiryTime) -> Claimed;
///   no worker stake is taken (TaskClaimed reports 0).
/// - selectWorker: requester, Open or Claimed -> WorkerSelected.
/// - submitWork: the claiming/selected worker, Claimed or WorkerSelected, now <= expiryTime.
///   With an evaluator -> Review and expiryTime is raised to at least the evaluation deadline
///   (now + evaluationWindow); without -> PendingApproval.
/// - acceptSubmission: requester, PendingApproval -> Accepted, pays the worker.
/// - assignEvaluator: requester, Open, unclaimed, no evaluator yet; evaluator and resolver
///   non-zero, windows non-zero, feeBps <= 10000. The stake is recorded, never transferred.
/// - evaluate: evaluator, Review, now <= evaluation deadline -> Appealing; records evaluatedAt
///   and raises expiryTime to at least the appeal deadline (now + appealWindow).
///   APPROVE/PARTIAL need at least one award; REJECT takes none; awards may total at most
///   reward minus the evaluator fee.
/// - appeal: worker, Appealing, now < appeal deadline -> Disputed.
/// - finalizeVerdict: anyone, Appealing, now >= appeal deadline. resolveDispute: resolver,
///   Disputed. Both settle: the evaluator fee (feeBps of the reward) goes to the evaluator;
///   APPROVE/PARTIAL pay each award minus the platform fee (one TaskCompleted per award),
///   refund the unawarded rest to the requester silently, and end Accepted; REJECT refunds
///   the rest with TaskCancelled and ends Cancelled.
/// - evaluatorTimeout: Review, now > evaluation deadline; anyone, or only the requester when
///   the contract was built with requesterOnlyTimeout. The recorded stake is reported as
///   forfeited; the task goes to PendingApproval (requester review).
/// - refundExpired: anyone, now > expiryTime, status not Accepted/Cancelled/Expired; refunds
///   the whole reward. It does not spare an Appealing task past its appeal deadline: that
///   hazard is the keeper's to avoid, as with the reference.
contract LegacyTaskMarket {
    enum TaskStatus {
        Open,
        Claimed,
        WorkerSelected,
        PendingApproval,
        Accepted,
        Expired,
        Cancelled,
        Review,
        Appealing,
        Disputed
    }

    enum VerdictType {
        APPROVE,
        REJECT,
        PARTIAL
    }

    struct Award {
        address worker;
        uint256 amount;
        uint16 rank;
    }

    struct TaskEvaluatorConfig {
        address evaluator;
        uint256 evaluatorStake;
        uint16 evaluatorFeeBps;
        uint32 evaluationWindow;
        uint32 appealWindow;
        address disputeResolver;
    }

    struct Verdict {
        bool issued;
        VerdictType verdictType;
        uint16 score;
        uint16 confidence;
        bytes32[] criteriaFlags;
        bytes32 evidenceHash;
        Award[] awards;
    }

    struct Task {
        bytes32 id;
        address requester;
        address worker;
        uint256 reward;
        uint256 expiryTime;
        bytes4 mode;
        TaskStatus status;
        bytes32 deliverable;
        uint256 createdAt;
        uint256 submittedAt;
        uint256 evaluatedAt;
    }

    uint256 public constant BPS = 10_000;

    address public immutable usdc;
    address public immutable treasury;
    uint16 public immutable platformFeeBps;
    bool public immutable requesterOnlyTimeout;

    mapping(bytes32 => Task) private _tasks;
    mapping(bytes32 => TaskEvaluatorConfig) private _configs;
    mapping(bytes32 => Verdict) private _verdicts;

    event TaskCreated(
        bytes32 indexed taskId,
        address indexed requester,
        uint256 reward,
        bytes4 indexed mode,
        uint256 expiryTime
    );
    event TaskClaimed(bytes32 indexed taskId, address indexed worker, uint256 stakeAmount);
    event TaskWorkerSelected(bytes32 indexed taskId, address indexed worker);
    event TaskSubmitted(bytes32 indexed taskId, address indexed worker, bytes32 deliverable);
    event EvaluatorAssigned(bytes32 indexed taskId, address indexed evaluator, uint256 stakeAmount);
    event TaskEvaluated(
        bytes32 indexed taskId, address indexed evaluator, uint8 verdictType, uint16 score
    );
    event TaskAppealed(bytes32 indexed taskId, address indexed appellant);
    event TaskDisputed(bytes32 indexed taskId, address indexed disputeResolver);
    event EvaluatorTimedOut(
        bytes32 indexed taskId, address indexed evaluator, uint256 forfeitedStake
    );
    event TaskCompleted(
        bytes32 indexed taskId,
        address indexed requester,
        address indexed worker,
        uint256 workerPayment,
        uint256 platformFee
    );
    event TaskExpired(bytes32 indexed taskId, address indexed requester, uint256 refundAmount);
    event TaskCancelled(bytes32 indexed taskId, address indexed requester, uint256 refundAmount);

    error TaskNotFound();
    error TaskExists();
    error InvalidTaskId();
    error InvalidReward();
    error InvalidExpiry();
    error InvalidStatus();
    error Unauthorized();
    error ZeroAddress();
    error InvalidConfig();
    error EvaluatorAlreadyAssigned();
    error DeadlinePassed();
    error EvaluationWindowActive();
    error AppealWindowActive();
    error AppealWindowClosed();
    error InvalidAwards();
    error NotExpired();

    constructor(address usdc_, address treasury_, uint16 platformFeeBps_, bool requesterOnly) {
        if (usdc_ == address(0) || treasury_ == address(0)) revert ZeroAddress();
        if (platformFeeBps_ > BPS) revert InvalidConfig();
        usdc = usdc_;
        treasury = treasury_;
        platformFeeBps = platformFeeBps_;
        requesterOnlyTimeout = requesterOnly;
    }

    // ----- requester and worker flow -----

    function createTask(bytes32 taskId, uint256 reward, uint256 expiryTime, bytes4 mode) external {
        if (taskId == bytes32(0)) revert InvalidTaskId();
        if (_tasks[taskId].requester != address(0)) revert TaskExists();
        if (reward == 0) revert InvalidReward();
        if (expiryTime <= block.timestamp) revert InvalidExpiry();
        Task storage t = _tasks[taskId];
        t.id = taskId;
        t.requester = msg.sender;
        t.reward = reward;
        t.expiryTime = expiryTime;
        t.mode = mode;
        t.createdAt = block.timestamp;
        TokenTransfer.pull(usdc, msg.sender, reward);
        emit TaskCreated(taskId, msg.sender, reward, mode, expiryTime);
    }

    function cancelTask(bytes32 taskId) external {
        Task storage t = _task(taskId);
        if (msg.sender != t.requester) revert Unauthorized();
        if (t.status != TaskStatus.Open) revert InvalidStatus();
        t.status = TaskStatus.Cancelled;
        TokenTransfer.pay(usdc, t.requester, t.reward);
        emit TaskCancelled(taskId, t.requester, t.reward);
    }

    function assignEvaluator(
        bytes32 taskId,
        address evaluator,
        uint256 stakeAmount,
        uint16 feeBps,
        uint32 evaluationWindowSecs,
        uint32 appealWindowSecs,
        address disputeResolver
    ) external {
        Task storage t = _task(taskId);
        if (msg.sender != t.requester) revert Unauthorized();
        if (t.status != TaskStatus.Open || t.worker != address(0)) revert InvalidStatus();
        if (_configs[taskId].evaluator != address(0)) revert EvaluatorAlreadyAssigned();
        if (evaluator == address(0) || disputeResolver == address(0)) revert ZeroAddress();
        if (feeBps > BPS || evaluationWindowSecs == 0 || appealWindowSecs == 0) {
            revert InvalidConfig();
        }
        _configs[taskId] = TaskEvaluatorConfig(
            evaluator, stakeAmount, feeBps, evaluationWindowSecs, appealWindowSecs, disputeResolver
        );
        emit EvaluatorAssigned(taskId, evaluator, stakeAmount);
    }

    function claimTask(bytes32 taskId) external {
        Task storage t = _task(taskId);
        if (msg.sender == t.requester) revert Unauthorized();
        if (t.status != TaskStatus.Open) revert InvalidStatus();
        if (block.timestamp > t.expiryTime) revert DeadlinePassed();
        t.worker = msg.sender;
        t.status = TaskStatus.Claimed;
        emit TaskClaimed(taskId, msg.sender, 0);
    }

    function selectWorker(bytes32 taskId, address worker) external {
        Task storage t = _task(taskId);
        if (msg.sender != t.requester) revert Unauthorized();
        if (t.status != TaskStatus.Open && t.status != TaskStatus.Claimed) revert InvalidStatus();
        if (worker == address(0)) revert ZeroAddress();
        t.worker = worker;
        t.status = TaskStatus.WorkerSelected;
        emit TaskWorkerSelected(taskId, worker);
    }

    function submitWork(bytes32 taskId, bytes32 deliverable) external {
        Task storage t = _task(taskId);
        if (msg.sender != t.worker) revert Unauthorized();
        if (t.status != TaskStatus.Claimed && t.status != TaskStatus.WorkerSelected) {
            revert InvalidStatus();
        }
        if (block.timestamp > t.expiryTime) revert DeadlinePassed();
        t.deliverable = deliverable;
        t.submittedAt = block.timestamp;
        TaskEvaluatorConfig storage c = _configs[taskId];
        if (c.evaluator != address(0)) {
            t.status = TaskStatus.Review;
            _raiseExpiry(t, block.timestamp + c.evaluationWindow);
        } else {
            t.status = TaskStatus.PendingApproval;
        }
        emit TaskSubmitted(taskId, msg.sender, deliverable);
    }

    function acceptSubmission(bytes32 taskId) external {
        Task storage t = _task(taskId);
        if (msg.sender != t.requester) revert Unauthorized();
        if (t.status != TaskStatus.PendingApproval) revert InvalidStatus();
        t.status = TaskStatus.Accepted;
        _payWorker(t, t.worker, t.reward);
    }

    // ----- evaluator flow -----

    function evaluate(
        bytes32 taskId,
        VerdictType verdictType,
        uint16 score,
        uint16 confidence,
        bytes32 evidenceHash,
        Award[] calldata awards
    ) external {
        Task storage t = _task(taskId);
        TaskEvaluatorConfig storage c = _configs[taskId];
        if (msg.sender != c.evaluator) revert Unauthorized();
        if (t.status != TaskStatus.Review) revert InvalidStatus();
        if (block.timestamp > t.submittedAt + c.evaluationWindow) revert DeadlinePassed();
        _checkAwards(t, c, verdictType, awards);
        Verdict storage v = _verdicts[taskId];
        v.issued = true;
        v.verdictType = verdictType;
        v.score = score;
        v.confidence = confidence;
        v.evidenceHash = evidenceHash;
        _storeAwards(v, awards);
        t.evaluatedAt = block.timestamp;
        t.status = TaskStatus.Appealing;
        _raiseExpiry(t, block.timestamp + c.appealWindow);
        emit TaskEvaluated(taskId, msg.sender, uint8(verdictType), score);
    }

    function appeal(bytes32 taskId) external {
        Task storage t = _task(taskId);
        if (msg.sender != t.worker) revert Unauthorized();
        if (t.status != TaskStatus.Appealing) revert InvalidStatus();
        TaskEvaluatorConfig storage c = _configs[taskId];
        if (block.timestamp >= t.evaluatedAt + c.appealWindow) revert AppealWindowClosed();
        t.status = TaskStatus.Disputed;
        emit TaskAppealed(taskId, msg.sender);
        emit TaskDisputed(taskId, c.disputeResolver);
    }

    /// Permissionless: the keeper's action once the appeal window has closed.
    function finalizeVerdict(bytes32 taskId) external {
        Task storage t = _task(taskId);
        if (t.status != TaskStatus.Appealing) revert InvalidStatus();
        if (block.timestamp < t.evaluatedAt + _configs[taskId].appealWindow) {
            revert AppealWindowActive();
        }
        Verdict storage v = _verdicts[taskId];
        _settle(t, v.verdictType, v.awards);
    }

    function resolveDispute(bytes32 taskId, VerdictType verdictType, Award[] calldata awards)
        external
    {
        Task storage t = _task(taskId);
        TaskEvaluatorConfig storage c = _configs[taskId];
        if (msg.sender != c.disputeResolver) revert Unauthorized();
        if (t.status != TaskStatus.Disputed) revert InvalidStatus();
        _checkAwards(t, c, verdictType, awards);
        Verdict storage v = _verdicts[taskId];
        v.verdictType = verdictType;
        _storeAwards(v, awards);
        _settle(t, verdictType, v.awards);
    }

    /// Permissionless unless built requester-only: the evaluator missed its window.
    function evaluatorTimeout(bytes32 taskId) external {
        Task storage t = _task(taskId);
        if (t.status != TaskStatus.Review) revert InvalidStatus();
        if (requesterOnlyTimeout && msg.sender != t.requester) revert Unauthorized();
        TaskEvaluatorConfig storage c = _configs[taskId];
        if (block.timestamp <= t.submittedAt + c.evaluationWindow) {
            revert EvaluationWindowActive();
        }
        t.status = TaskStatus.PendingApproval;
        emit EvaluatorTimedOut(taskId, c.evaluator, c.evaluatorStake);
    }

    /// Permissionless: refund the requester once the task has expired unsettled.
    function refundExpired(bytes32 taskId) external {
        Task storage t = _task(taskId);
        TaskStatus s = t.status;
        if (s == TaskStatus.Accepted || s == TaskStatus.Cancelled || s == TaskStatus.Expired) {
            revert InvalidStatus();
        }
        if (block.timestamp <= t.expiryTime) revert NotExpired();
        t.status = TaskStatus.Expired;
        TokenTransfer.pay(usdc, t.requester, t.reward);
        emit TaskExpired(taskId, t.requester, t.reward);
    }

    // ----- views -----

    function getTask(bytes32 taskId) external view returns (Task memory) {
        return _tasks[taskId];
    }

    function getTaskVerdict(bytes32 taskId) external view returns (Verdict memory) {
        return _verdicts[taskId];
    }

    function getTaskEvaluatorConfig(bytes32 taskId)
        external
        view
        returns (TaskEvaluatorConfig memory)
    {
        return _configs[taskId];
    }

    // ----- internals -----

    function _task(bytes32 taskId) private view returns (Task storage t) {
        t = _tasks[taskId];
        if (t.requester == address(0)) revert TaskNotFound();
    }

    function _raiseExpiry(Task storage t, uint256 deadline) private {
        if (t.expiryTime < deadline) t.expiryTime = deadline;
    }

    function _evaluatorFee(Task storage t, TaskEvaluatorConfig storage c)
        private
        view
        returns (uint256)
    {
        return (t.reward * c.evaluatorFeeBps) / BPS;
    }

    function _checkAwards(
        Task storage t,
        TaskEvaluatorConfig storage c,
        VerdictType verdictType,
        Award[] calldata awards
    ) private view {
        if (verdictType == VerdictType.REJECT) {
            if (awards.length != 0) revert InvalidAwards();
            return;
        }
        if (awards.length == 0) revert InvalidAwards();
        uint256 total;
        for (uint256 i = 0; i < awards.length; ++i) {
            if (awards[i].worker == address(0)) revert InvalidAwards();
            total += awards[i].amount;
        }
        if (total > t.reward - _evaluatorFee(t, c)) revert InvalidAwards();
    }

    function _storeAwards(Verdict storage v, Award[] calldata awards) private {
        delete v.awards;
        for (uint256 i = 0; i < awards.length; ++i) {
            v.awards.push(awards[i]);
        }
    }

    function _settle(Task storage t, VerdictType verdictType, Award[] storage awards) private {
        TaskEvaluatorConfig storage c = _configs[t.id];
        uint256 evaluatorFee = _evaluatorFee(t, c);
        uint256 rest = t.reward - evaluatorFee;
        TokenTransfer.pay(usdc, c.evaluator, evaluatorFee);
        if (verdictType == VerdictType.REJECT) {
            t.status = TaskStatus.Cancelled;
            TokenTransfer.pay(usdc, t.requester, rest);
            emit TaskCancelled(t.id, t.requester, rest);
            return;
        }
        t.status = TaskStatus.Accepted;
        for (uint256 i = 0; i < awards.length; ++i) {
            rest -= awards[i].amount;
            _payWorker(t, awards[i].worker, awards[i].amount);
        }
        TokenTransfer.pay(usdc, t.requester, rest);
    }

    function _payWorker(Task storage t, address worker, uint256 amount) private {
        uint256 fee = (amount * platformFeeBps) / BPS;
        uint256 payment = amount - fee;
        TokenTransfer.pay(usdc, worker, payment);
        TokenTransfer.pay(usdc, treasury, fee);
        emit TaskCompleted(t.id, t.requester, worker, payment, fee);
    }
}
