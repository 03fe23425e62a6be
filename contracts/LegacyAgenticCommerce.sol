// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TokenTransfer} from "./IERC20Minimal.sol";

/// ERC-8183 job escrow, older "ACP" shape still deployed in places: one payment token fixed in
/// the constructor (`paymentToken()`), JobCreated without hook, ProviderSet without agent id,
/// BudgetSet without token, no evaluation grace period and no Open -> Expired transition.
///
/// Written for the devnet and the tests from the published interface, not for production.
/// Rules where the interface is silent (same as AgenticCommerce unless stated):
/// - getJob returns the same Job struct as the current contract so one decoder reads both:
///   hook and providerAgentId are always zero, paymentToken is the fixed token.
/// - submit is allowed only from Funded.
/// - claimRefund: Funded or Submitted, block.timestamp >= expiredAt, refunds the escrow.
contract LegacyAgenticCommerce {
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

    uint256 public constant BPS = 10_000;

    address public immutable paymentToken;
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
        uint256 expiredAt
    );
    event ProviderSet(uint256 indexed jobId, address indexed provider);
    event BudgetSet(uint256 indexed jobId, uint256 amount);
    event JobFunded(uint256 indexed jobId, address indexed client, uint256 amount);
    event JobSubmitted(uint256 indexed jobId, address indexed provider, bytes32 deliverable);
    event JobCompleted(uint256 indexed jobId, address indexed evaluator, bytes32 reason);
    event JobRejected(uint256 indexed jobId, address indexed rejector, bytes32 reason);
    event JobExpired(uint256 indexed jobId);
    event PaymentReleased(uint256 indexed jobId, address indexed provider, uint256 amount);
    event PlatformFeePaid(uint256 indexed jobId, address indexed treasury, uint256 amount);
    event EvaluatorFeePaid(uint256 indexed jobId, address indexed evaluator, uint256 amount);
    event Refunded(uint256 indexed jobId, address indexed client, uint256 amount);

    error JobNotFound();
    error InvalidStatus();
    error Unauthorized();
    error ZeroAddress();
    error InvalidExpiry();
    error ProviderAlreadySet();
    error ProviderNotSet();
    error BudgetMismatch();
    error DeadlinePassed();
    error NotExpired();
    error FeesTooHigh();

    constructor(
        address paymentToken_,
        address treasury_,
        uint256 platformFeeBps_,
        uint256 evaluatorFeeBps_
    ) {
        if (paymentToken_ == address(0) || treasury_ == address(0)) revert ZeroAddress();
        if (platformFeeBps_ + evaluatorFeeBps_ > BPS) revert FeesTooHigh();
        paymentToken = paymentToken_;
        treasury = treasury_;
        platformFeeBps = platformFeeBps_;
        evaluatorFeeBps = evaluatorFeeBps_;
    }

    function createJob(
        address provider,
        address evaluator,
        uint256 expiredAt,
        string calldata description
    ) external returns (uint256 jobId) {
        if (evaluator == address(0)) revert ZeroAddress();
        if (expiredAt <= block.timestamp) revert InvalidExpiry();
        jobId = ++jobCounter;
        Job storage job = _jobs[jobId];
        job.id = jobId;
        job.client = msg.sender;
        job.provider = provider;
        job.evaluator = evaluator;
        job.description = description;
        job.expiredAt = expiredAt;
        job.paymentToken = paymentToken;
        emit JobCreated(jobId, msg.sender, provider, evaluator, expiredAt);
    }

    function setProvider(uint256 jobId, address provider) external {
        Job storage job = _job(jobId);
        if (msg.sender != job.client) revert Unauthorized();
        if (job.status != JobStatus.Open) revert InvalidStatus();
        if (provider == address(0)) revert ZeroAddress();
        if (job.provider != address(0)) revert ProviderAlreadySet();
        job.provider = provider;
        emit ProviderSet(jobId, provider);
    }

    function setBudget(uint256 jobId, uint256 amount, bytes calldata) external {
        Job storage job = _job(jobId);
        if (msg.sender != job.client && msg.sender != job.provider) revert Unauthorized();
        if (job.status != JobStatus.Open) revert InvalidStatus();
        job.budget = amount;
        emit BudgetSet(jobId, amount);
    }

    function fund(uint256 jobId, uint256 expectedBudget, bytes calldata) external {
        Job storage job = _job(jobId);
        if (msg.sender != job.client) revert Unauthorized();
        if (job.status != JobStatus.Open) revert InvalidStatus();
        if (job.provider == address(0)) revert ProviderNotSet();
        if (job.budget != expectedBudget) revert BudgetMismatch();
        if (block.timestamp >= job.expiredAt) revert DeadlinePassed();
        job.status = JobStatus.Funded;
        TokenTransfer.pull(paymentToken, msg.sender, job.budget);
        emit JobFunded(jobId, msg.sender, job.budget);
    }

    function submit(uint256 jobId, bytes32 deliverable, bytes calldata) external {
        Job storage job = _job(jobId);
        if (msg.sender != job.provider) revert Unauthorized();
        if (job.status != JobStatus.Funded) revert InvalidStatus();
        if (block.timestamp >= job.expiredAt) revert DeadlinePassed();
        job.status = JobStatus.Submitted;
        job.submittedAt = block.timestamp;
        emit JobSubmitted(jobId, msg.sender, deliverable);
    }

    function complete(uint256 jobId, bytes32 reason, bytes calldata) external {
        Job storage job = _job(jobId);
        if (msg.sender != job.evaluator) revert Unauthorized();
        if (job.status != JobStatus.Submitted) revert InvalidStatus();
        job.status = JobStatus.Completed;
        emit JobCompleted(jobId, msg.sender, reason);
        uint256 budget = job.budget;
        if (budget == 0) return;
        uint256 platformFee = (budget * platformFeeBps) / BPS;
        uint256 evaluatorFee = (budget * evaluatorFeeBps) / BPS;
        uint256 net = budget - platformFee - evaluatorFee;
        TokenTransfer.pay(paymentToken, job.provider, net);
        emit PaymentReleased(jobId, job.provider, net);
        if (platformFee > 0) {
            TokenTransfer.pay(paymentToken, treasury, platformFee);
            emit PlatformFeePaid(jobId, treasury, platformFee);
        }
        if (evaluatorFee > 0) {
            TokenTransfer.pay(paymentToken, job.evaluator, evaluatorFee);
            emit EvaluatorFeePaid(jobId, job.evaluator, evaluatorFee);
        }
    }

    function reject(uint256 jobId, bytes32 reason, bytes calldata) external {
        Job storage job = _job(jobId);
        JobStatus status = job.status;
        if (status == JobStatus.Open) {
            if (msg.sender != job.client) revert Unauthorized();
        } else if (status == JobStatus.Funded || status == JobStatus.Submitted) {
            if (msg.sender != job.evaluator) revert Unauthorized();
        } else {
            revert InvalidStatus();
        }
        job.status = JobStatus.Rejected;
        emit JobRejected(jobId, msg.sender, reason);
        if (status != JobStatus.Open && job.budget > 0) {
            TokenTransfer.pay(paymentToken, job.client, job.budget);
            emit Refunded(jobId, job.client, job.budget);
        }
    }

    /// Permissionless refund of an expired escrow; no grace period in this version.
    function claimRefund(uint256 jobId) external {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Funded && job.status != JobStatus.Submitted) {
            revert InvalidStatus();
        }
        if (block.timestamp < job.expiredAt) revert NotExpired();
        job.status = JobStatus.Expired;
        emit JobExpired(jobId);
        uint256 amount = job.budget;
        if (amount > 0) {
            TokenTransfer.pay(paymentToken, job.client, amount);
            emit Refunded(jobId, job.client, amount);
        }
    }

    function getJob(uint256 jobId) external view returns (Job memory) {
        return _jobs[jobId];
    }

    function _job(uint256 jobId) private view returns (Job storage job) {
        if (jobId == 0 || jobId > jobCounter) revert JobNotFound();
        job = _jobs[jobId];
    }
}
