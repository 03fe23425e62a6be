// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TokenTransfer} from "./IERC20Minimal.sol";

/// ERC-8183 job escrow, current reference shape: one ERC-20 payment token per job, a hook
/// address, provider agent ids and a one-hour evaluation grace period on refunds.
///
/// Written for the devnet and the tests from the published interface, not for production.
/// Selectors, events and errors are the reference's (erc-8183/base-contracts,
/// contracts/AgenticCommerce.sol): InvalidJob for an id that was never created, WrongStatus
/// for a call in the wrong status and for a deadline on the wrong side (fund at or after
/// expiredAt, claimRefund before it, setProvider once a provider is set; submit has no
/// deadline), ZeroAddress for a
/// missing address or token, ProviderCannotBeEvaluator (createJob and setProvider),
/// GracePeriodActive, ProviderNotSet, BudgetMismatch, FeesTooHigh.
/// Checks run in the reference's order: job, status, caller, then the call's own.
/// Events follow the reference's order: complete emits the fee events, then JobCompleted,
/// then PaymentReleased; reject and claimRefund emit Refunded before JobRejected/JobExpired.
///
/// Devnet rules, where this contract departs from the reference or the interface is silent:
/// - createJob: evaluator must be non-zero and expiredAt merely in the future (else
///   ExpiryTooShort); the reference's five-minute minimum is not kept, so devnet flows and
///   tests can create short jobs. The provider may be zero and set later with setProvider.
/// - setBudget needs a non-zero token; the budget can change until the job is funded.
/// - submit from Open is allowed only when the budget is zero (nothing to escrow).
/// - complete pays platform and evaluator fees (bps of the budget, rounded down, fixed at
///   deployment) and the rest to the provider. As in the reference, PlatformFeePaid and
///   EvaluatorFeePaid are emitted only for a non-zero fee, PaymentReleased always (0 included);
///   fund of a zero budget moves nothing and needs no token.
/// - claimRefund reproduces the reference's hazard: on an expired Open job it transfers
///   job.budget to the client although nothing was funded.
/// - hook is stored and never called (no whitelist); optParams are accepted and ignored.
contract AgenticCommerce {
    enum JobStatus {
        Open,
        Funded,
        Submitted,
        Completed,
        Rejected,
        Expired
    }

    struct Job {
        uint256 id;
        address client;
        address provider;
        address evaluator;
        string description;
        uint256 budget;
        uint256 expiredAt;
        JobStatus status;
        address hook;
        address paymentToken;
        uint256 providerAgentId;
        uint256 submittedAt;
    }

    uint256 public constant EVALUATION_GRACE_PERIOD = 1 hours;
    uint256 public constant BPS = 10_000;

    address public immutable treasury;
    uint256 public immutable platformFeeBps;
    uint256 public immutable evaluatorFeeBps;
    uint256 public jobCounter;

    mapping(uint256 => Job) private _jobs;

    event JobCreated(
        uint256 indexed jobId,
        address indexed client,
        address indexed provider,
        address evaluator,
        uint256 expiredAt,
        address hook
    );
    event ProviderSet(uint256 indexed jobId, address indexed provider, uint256 agentId);
    event BudgetSet(uint256 indexed jobId, address indexed token, uint256 amount);
    event JobFunded(uint256 indexed jobId, address indexed client, uint256 amount);
    event JobSubmitted(uint256 indexed jobId, address indexed provider, bytes32 deliverable);
    event JobCompleted(uint256 indexed jobId, address indexed evaluator, bytes32 reason);
    event JobRejected(uint256 indexed jobId, address indexed rejector, bytes32 reason);
    event JobExpired(uint256 indexed jobId);
    event PaymentReleased(uint256 indexed jobId, address indexed provider, uint256 amount);
    event PlatformFeePaid(uint256 indexed jobId, address indexed treasury, uint256 amount);
    event EvaluatorFeePaid(uint256 indexed jobId, address indexed evaluator, uint256 amount);
    event Refunded(uint256 indexed jobId, address indexed client, uint256 amount);

    error InvalidJob();
    error WrongStatus();
    error Unauthorized();
    error ZeroAddress();
    error ExpiryTooShort();
    error ProviderNotSet();
    error FeesTooHigh();
    error BudgetMismatch();
    error GracePeriodActive();
    error ProviderCannotBeEvaluator();

    constructor(address treasury_, uint256 platformFeeBps_, uint256 evaluatorFeeBps_) {
        if (treasury_ == address(0)) revert ZeroAddress();
        if (platformFeeBps_ + evaluatorFeeBps_ > BPS) revert FeesTooHigh();
        treasury = treasury_;
        platformFeeBps = platformFeeBps_;
        evaluatorFeeBps = evaluatorFeeBps_;
    }

    function createJob(
        address provider,
        address evaluator,
        uint256 expiredAt,
        string calldata description,
        address hook,
        uint256 providerAgentId
    ) external returns (uint256 jobId) {
        if (evaluator == address(0)) revert ZeroAddress();
        if (evaluator == provider) revert ProviderCannotBeEvaluator();
        if (expiredAt <= block.timestamp) revert ExpiryTooShort();
        jobId = ++jobCounter;
        Job storage job = _jobs[jobId];
        job.id = jobId;
        job.client = msg.sender;
        job.provider = provider;
        job.evaluator = evaluator;
        job.description = description;
        job.expiredAt = expiredAt;
        job.hook = hook;
        job.providerAgentId = providerAgentId;
        emit JobCreated(jobId, msg.sender, provider, evaluator, expiredAt, hook);
    }

    function setProvider(uint256 jobId, address provider, uint256 agentId) external {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus();
        if (msg.sender != job.client) revert Unauthorized();
        if (job.provider != address(0)) revert WrongStatus();
        if (provider == address(0)) revert ZeroAddress();
        if (provider == job.evaluator) revert ProviderCannotBeEvaluator();
        job.provider = provider;
        job.providerAgentId = agentId;
        emit ProviderSet(jobId, provider, agentId);
    }

    function setBudget(uint256 jobId, address token, uint256 amount, bytes calldata) external {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus();
        if (msg.sender != job.client && msg.sender != job.provider) revert Unauthorized();
        if (token == address(0)) revert ZeroAddress();
        job.paymentToken = token;
        job.budget = amount;
        emit BudgetSet(jobId, token, amount);
    }

    function fund(uint256 jobId, uint256 expectedBudget, bytes calldata) external {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus();
        if (msg.sender != job.client) revert Unauthorized();
        if (job.provider == address(0)) revert ProviderNotSet();
        if (job.budget != expectedBudget) revert BudgetMismatch();
        if (block.timestamp >= job.expiredAt) revert WrongStatus();
        job.status = JobStatus.Funded;
        // A zero budget moves nothing, so a job whose budget was never set (no token) funds.
        if (job.budget > 0) TokenTransfer.pull(job.paymentToken, msg.sender, job.budget);
        emit JobFunded(jobId, msg.sender, job.budget);
    }

    function submit(uint256 jobId, bytes32 deliverable, bytes calldata) external {
        Job storage job = _job(jobId);
        bool unfundedFree = job.status == JobStatus.Open && job.budget == 0;
        if (job.status != JobStatus.Funded && !unfundedFree) revert WrongStatus();
        if (msg.sender != job.provider) revert Unauthorized();
        // As in the reference, submit has no deadline: a late submission is allowed and
        // starts the evaluation grace period that claimRefund waits for.
        job.status = JobStatus.Submitted;
        job.submittedAt = block.timestamp;
        emit JobSubmitted(jobId, msg.sender, deliverable);
    }

    function complete(uint256 jobId, bytes32 reason, bytes calldata) external {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Submitted) revert WrongStatus();
        if (msg.sender != job.evaluator) revert Unauthorized();
        job.status = JobStatus.Completed;
        uint256 budget = job.budget;
        uint256 platformFee = (budget * platformFeeBps) / BPS;
        uint256 evaluatorFee = (budget * evaluatorFeeBps) / BPS;
        uint256 net = budget - platformFee - evaluatorFee;
        address token = job.paymentToken;
        // The reference's order: fees, then JobCompleted, then the provider's payment.
        if (platformFee > 0) {
            TokenTransfer.pay(token, treasury, platformFee);
            emit PlatformFeePaid(jobId, treasury, platformFee);
        }
        if (evaluatorFee > 0) {
            TokenTransfer.pay(token, job.evaluator, evaluatorFee);
            emit EvaluatorFeePaid(jobId, job.evaluator, evaluatorFee);
        }
        if (net > 0) TokenTransfer.pay(token, job.provider, net);
        emit JobCompleted(jobId, msg.sender, reason);
        // Emitted whatever the amount, 0 included, as in the reference.
        emit PaymentReleased(jobId, job.provider, net);
    }

    function reject(uint256 jobId, bytes32 reason, bytes calldata) external {
        Job storage job = _job(jobId);
        JobStatus status = job.status;
        if (status == JobStatus.Open) {
            if (msg.sender != job.client) revert Unauthorized();
        } else if (status == JobStatus.Funded || status == JobStatus.Submitted) {
            if (msg.sender != job.evaluator) revert Unauthorized();
        } else {
            revert WrongStatus();
        }
        job.status = JobStatus.Rejected;
        if (status != JobStatus.Open && job.budget > 0) {
            TokenTransfer.pay(job.paymentToken, job.client, job.budget);
            emit Refunded(jobId, job.client, job.budget);
        }
        emit JobRejected(jobId, msg.sender, reason);
    }

    /// Permissionless: the keeper's action once a job's deadline has passed.
    function claimRefund(uint256 jobId) external {
        Job storage job = _job(jobId);
        JobStatus status = job.status;
        if (status != JobStatus.Open && status != JobStatus.Funded && status != JobStatus.Submitted) {
            revert WrongStatus();
        }
        if (block.timestamp < job.expiredAt) revert WrongStatus();
        if (
            status == JobStatus.Submitted
                && block.timestamp < job.submittedAt + EVALUATION_GRACE_PERIOD
        ) revert GracePeriodActive();
        job.status = JobStatus.Expired;
        // Hazard kept on purpose: an Open job's budget was never escrowed, yet it is paid out.
        uint256 amount = job.budget;
        if (amount > 0) {
            TokenTransfer.pay(job.paymentToken, job.client, amount);
            emit Refunded(jobId, job.client, amount);
        }
        emit JobExpired(jobId);
    }

    function getJob(uint256 jobId) external view returns (Job memory) {
        return _jobs[jobId];
    }

    function _job(uint256 jobId) private view returns (Job storage job) {
        if (jobId == 0 || jobId > jobCounter) revert InvalidJob();
        job = _jobs[jobId];
    }
}
