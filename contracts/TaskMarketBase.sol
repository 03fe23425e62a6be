// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TokenTransfer} from "./IERC20Minimal.sol";

/// The caller relayed by an ERC-8194 style forwarder.
interface ITaskMarketForwarder {
    function pgtrSender() external view returns (address);
}

/// Shared types, events, errors, storage and guards of the devnet task market diamond.
///
/// The external interface (selectors, event shapes, custom errors, forwarder and deadline
/// rules) follows the deployed ERC-8195 diamond at revision 21; the code is ours, written
/// for the devnet and the tests. Storage lives at one fixed slot so every facet, called by
/// delegatecall from the diamond, sees the same state.
abstract contract TaskMarketBase {
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

    struct Verdict {
        bool issued;
        VerdictType verdictType;
        uint16 score;
        uint16 confidence;
        bytes32[] criteriaFlags;
        bytes32 evidenceHash;
        Award[] awards;
    }

    struct TaskEvaluatorConfig {
        address evaluator;
        uint256 evaluatorStake;
        uint16 evaluatorFeeBps;
        uint32 evaluationWindow;
        uint32 appealWindow;
        address disputeResolver;
    }

    /// getTask's 14 fields, in the revision-21 order.
    struct Task {
        bytes32 id;
        address requester;
        address worker;
        TaskStatus status;
        bytes4 mode;
        uint256 reward;
        uint256 expiryTime;
        uint256 stakeAmount;
        uint16 feeBps;
        bytes32 deliverable;
        uint8 rating;
        address hookContract;
        bool stakeRequired;
        uint16 stakeBps;
    }

    struct TaskConfig {
        uint256 reward;
        uint256 duration;
        bytes4 mode;
        uint256 pitchDeadline;
        uint256 bidDeadline;
        bytes4 auctionSubtype;
    }

    struct StakeConfig {
        bool required;
        uint16 bps;
    }

    struct HookConfig {
        address[] contracts;
        bytes data;
    }

    struct TaskContent {
        bytes32 contentHash;
        string contentURI;
        bytes32[] tags;
    }

    struct AppStorage {
        mapping(bytes4 => address) facets;
        address owner;
        address usdc;
        address feeRecipient;
        uint16 defaultFeeBps;
        bool paused;
        mapping(address => bool) trustedForwarders;
        mapping(address => uint256) requesterNonce;
        mapping(bytes32 => Task) tasks;
        mapping(bytes32 => TaskEvaluatorConfig) evalConfigs;
        mapping(bytes32 => Verdict) verdicts;
        mapping(bytes32 => uint256) phaseDeadline;
        mapping(bytes32 => uint256) evalFeePaid;
        mapping(bytes32 => uint256) activeSubmissions;
        mapping(bytes32 => bool) hadSubmissions;
        mapping(bytes32 => mapping(address => uint256)) submissionCount;
        mapping(bytes32 => mapping(address => bool)) rejected;
        mapping(bytes32 => mapping(address => mapping(bytes32 => bool))) submitted;
    }

    bytes32 internal constant STORAGE_SLOT = keccak256("escrow-keeper.devnet.taskmarket.v21");
    uint256 internal constant BPS = 10_000;
    uint256 internal constant MIN_APPEAL_WINDOW = 300;
    uint256 internal constant REVISION = 21;

    bytes4 internal constant BOUNTY = bytes4(keccak256("TMP.mode.bounty"));
    bytes4 internal constant CLAIM = bytes4(keccak256("TMP.mode.claim"));
    bytes4 internal constant PITCH = bytes4(keccak256("TMP.mode.pitch"));
    bytes4 internal constant BENCHMARK = bytes4(keccak256("TMP.mode.benchmark"));

    event TaskCreated(
        bytes32 indexed taskId,
        address indexed requester,
        uint256 reward,
        bytes4 indexed mode,
        uint256 expiryTime,
        bool stakeRequired,
        uint16 stakeBps
    );
    event TaskUpdated(bytes32 indexed taskId, uint256 newReward, uint256 newExpiryTime);
    event TaskClaimed(bytes32 indexed taskId, address indexed worker, uint256 stakeAmount);
    event TaskWorkerSelected(bytes32 indexed taskId, address indexed worker);
    event TaskSubmitted(bytes32 indexed taskId, address indexed worker, bytes32 deliverable);
    event SubmissionRejected(bytes32 indexed taskId, address indexed worker);
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
    event StakeReturned(bytes32 indexed taskId, address indexed worker, uint256 stakeAmount);
    event RequesterReputation(
        bytes32 indexed taskId,
        address indexed requester,
        bytes32 event_,
        uint256 reward,
        uint32 submissionCount,
        bool selfAward
    );
    event ForwarderUpdated(address indexed forwarder, bool trusted);
    event Paused(address account);
    event Unpaused(address account);

    error NotTrustedForwarder();
    error NotRequester();
    error NotWorker();
    error NotEvaluator();
    error NotDisputeResolver();
    error NotOwner();
    error TaskDoesNotExist();
    error TaskNotOpen();
    error TaskNotClaimed();
    error TaskAlreadyAccepted();
    error TaskIsCancelled();
    error TaskIsExpired();
    error TaskNotYetExpired();
    error TaskAlreadyRefunded();
    error NotInAppealingState();
    error NotInDisputedState();
    error NotInReviewState();
    error NotAClaimTask();
    error NotAPitchTask();
    error InvalidMode();
    error InvalidRequester();
    error InvalidWorker();
    error WorkerMismatch();
    error WorkerNotSelected();
    error DeliverableMismatch();
    error DeliverableAlreadySet();
    error UseEvaluate();
    error EvaluatorAlreadyAssigned();
    error InvalidEvaluator();
    error EvaluatorCannotBeRequester();
    error DisputeResolverCannotBeRequester();
    error WrongStatusForEvaluation();
    error AppealWindowClosed();
    error AppealWindowStillOpen();
    error AppealWindowTooShort();
    error NoVerdictIssued();
    error EvaluationWindowNotExpired();
    error DisputeResolutionMustAwardWorkers();
    error AwardsRequired();
    error AwardsExceedEscrow();
    error InvalidAwardRecipient();
    error SubmissionNotFound();
    error SubmissionsExist();
    error SubmissionAlreadyRejected();
    error NoActiveSubmissions();
    error ExpiryMustBeInFuture();
    error NoRewardChange();
    error FeeBpsTooHigh();
    error StakeBpsTooHigh();
    error RewardMustBeGreaterThanZero();
    error DurationMustBeGreaterThanZero();
    error InvalidHookAddress();
    error InvalidForwarderAddress();
    error EnforcedPause();

    function _s() internal pure returns (AppStorage storage s) {
        bytes32 slot = STORAGE_SLOT;
        assembly {
            s.slot := slot
        }
    }

    function _requireForwarder(AppStorage storage s) internal view {
        if (!s.trustedForwarders[msg.sender]) revert NotTrustedForwarder();
    }

    function _requireNotPaused(AppStorage storage s) internal view {
        if (s.paused) revert EnforcedPause();
    }

    /// The relayed actor when a trusted forwarder calls, else the caller itself.
    function _sender(AppStorage storage s) internal view returns (address) {
        if (s.trustedForwarders[msg.sender]) {
            return ITaskMarketForwarder(msg.sender).pgtrSender();
        }
        return msg.sender;
    }

    function _existing(AppStorage storage s, bytes32 taskId) internal view returns (Task storage t) {
        t = s.tasks[taskId];
        if (t.requester == address(0)) revert TaskDoesNotExist();
    }

    function _contest(bytes4 mode) internal pure returns (bool) {
        return mode == BOUNTY || mode == BENCHMARK;
    }

    function _raiseExpiry(Task storage t, uint256 deadline) internal {
        if (deadline > t.expiryTime) t.expiryTime = deadline;
    }

    function _pay(AppStorage storage s, address to, uint256 amount) internal {
        TokenTransfer.pay(s.usdc, to, amount);
    }

    function _pull(AppStorage storage s, address from, uint256 amount) internal {
        TokenTransfer.pull(s.usdc, from, amount);
    }

    /// One award paid to a worker, minus the task's platform fee, announced by TaskCompleted.
    function _payWorker(AppStorage storage s, Task storage t, address worker, uint256 amount)
        internal
    {
        uint256 fee = (amount * t.feeBps) / BPS;
        _pay(s, worker, amount - fee);
        _pay(s, s.feeRecipient, fee);
        emit TaskCompleted(t.id, t.requester, worker, amount - fee, fee);
    }

    /// Shared by createTask and assignEvaluator, so both check the same terms.
    function _applyEvaluatorConfig(
        AppStorage storage s,
        bytes32 taskId,
        address requester,
        TaskEvaluatorConfig memory c
    ) internal {
        if (c.evaluator == address(0)) revert InvalidEvaluator();
        if (c.evaluator == requester) revert EvaluatorCannotBeRequester();
        if (c.disputeResolver == requester) revert DisputeResolverCannotBeRequester();
        if (s.evalConfigs[taskId].evaluator != address(0)) revert EvaluatorAlreadyAssigned();
        if (c.evaluatorFeeBps > BPS) revert FeeBpsTooHigh();
        if (c.appealWindow < MIN_APPEAL_WINDOW) revert AppealWindowTooShort();
        s.evalConfigs[taskId] = c;
        _pull(s, requester, c.evaluatorStake);
        emit EvaluatorAssigned(taskId, c.evaluator, c.evaluatorStake);
    }
}
