// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TokenTransfer} from "./IERC20Minimal.sol";

/// The hook interface of the ERC8183 dialect: called around each lifecycle action; a
/// reverting beforeAction blocks the action (claimRefund included).
interface IERC8183Hook {
    function beforeAction(uint256 jobId, bytes4 selector, bytes calldata data) external;
    function afterAction(uint256 jobId, bytes4 selector, bytes calldata data) external;
}

/// ERC-8183 job escrow in the shape of the newest reference (`ERC8183.sol`): uint48 expiry,
/// actor-indexed setter events, partial settlement through claims, payout receivers, a
/// pause switch and hooks that can block lifecycle calls, claimRefund(uint256,bytes) included.
///
/// Written for the devnet and the tests from the published interface, not for production.
/// Rules where the interface is silent or that we simplify:
/// - one admin (the deployer) instead of role-based access control; no token allowlist and no
///   hook whitelist (any hook address is accepted); no upgrade proxy.
/// - createJob exists in both published shapes: without and with a trailing optParams.
/// - forceRefund(jobId, to): admin only, only while paused; refunds budget - settled to `to`.
/// - a payout receiver gets PaymentReleased; the IDisburser callback is not implemented.
contract ERC8183 {
    enum JobStatus {
        Open,
        Funded,
        Submitted,
        Completed,
        Rejected,
        Expired
    }

    struct Job {
        address client;
        JobStatus status;
        address provider;
        uint48 expiredAt;
        address evaluator;
        uint48 submittedAt;
        uint256 budget;
        address hook;
        address paymentToken;
        uint256 providerAgentId;
        string description;
        uint256 settledAmount;
        address payoutReceiver;
    }

    uint256 public constant EVALUATION_GRACE_PERIOD = 1 hours;
    uint256 public constant BPS = 10_000;

    address public immutable admin;
    address public immutable platformTreasury;
    uint256 public immutable platformFeeBP;
    uint256 public immutable evaluatorFeeBP;
    uint256 public jobCounter;
    bool public paused;
    bool private _entered;

    mapping(uint256 => Job) private _jobs;
    mapping(uint256 => bytes32) public pendingClaimHash;

    event JobCreated(
        uint256 indexed jobId,
        address indexed client,
        address indexed provider,
        address evaluator,
        uint48 expiredAt,
        address hook
    );
    event ProviderSet(
        uint256 indexed jobId, address indexed actor, address indexed provider, uint256 agentId
    );
    event PayoutReceiverSet(
        uint256 indexed jobId, address indexed actor, address indexed payoutReceiver
    );
    event BudgetSet(
        uint256 indexed jobId, address indexed actor, address indexed token, uint256 amount
    );
    event JobFunded(uint256 indexed jobId, address indexed client, uint256 amount);
    event JobSubmitted(uint256 indexed jobId, address indexed provider, bytes32 deliverable);
    event JobCompleted(uint256 indexed jobId, address indexed evaluator, bytes32 reason);
    event JobRejected(uint256 indexed jobId, address indexed rejector, bytes32 reason);
    event JobExpired(uint256 indexed jobId);
    event PaymentReleased(uint256 indexed jobId, address indexed recipient, uint256 amount);
    event PlatformFeePaid(uint256 indexed jobId, address indexed platformTreasury, uint256 amount);
    event EvaluatorFeePaid(uint256 indexed jobId, address indexed evaluator, uint256 amount);
    event Refunded(uint256 indexed jobId, address indexed client, uint256 amount);
    event Settled(uint256 indexed jobId, uint256 cumulativeAmount, uint256 delta);
    event ClaimSubmitted(
        uint256 indexed jobId,
        address indexed provider,
        uint256 cumulativeAmount,
        uint256 delta,
        bytes32 deliverable,
        bytes optParams
    );
    event ClaimSettled(
        uint256 indexed jobId,
        address indexed settler,
        uint256 cumulativeAmount,
        uint256 delta,
        bytes32 deliverable
    );
    event ClaimApproved(
        uint256 indexed jobId,
        address indexed approver,
        uint256 cumulativeAmount,
        uint256 delta,
        bytes32 deliverable
    );
    event ClaimRejected(uint256 indexed jobId, address indexed rejector, bytes32 reason);
    event HookDetached(uint256 indexed jobId, address indexed hook);
    event Paused(address account);
    event Unpaused(address account);

    error InvalidJob();
    error WrongStatus();
    error Unauthorized();
    error ZeroAddress();
    error ExpiryTooShort();
    error ProviderNotSet();
    error FeesTooHigh();
    error BudgetMismatch();
    error PaymentTokenMismatch();
    error ProviderCannotBeEvaluator();
    error ClientCannotBeProvider();
    error GracePeriodActive();
    error InvalidReceiver();
    error NoNewSettlement();
    error ExceedsBudget();
    error EmptyDeliverable();
    error PendingClaimExists();
    error NoPendingClaim();
    error EnforcedPause();
    error ExpectedPause();
    error ReentrancyGuardReentrantCall();

    modifier whenNotPaused() {
        if (paused) revert EnforcedPause();
        _;
    }

    modifier nonReentrant() {
        if (_entered) revert ReentrancyGuardReentrantCall();
        _entered = true;
        _;
        _entered = false;
    }

    modifier onlyAdmin() {
        if (msg.sender != admin) revert Unauthorized();
        _;
    }

    constructor(address treasury_, uint256 platformFeeBP_, uint256 evaluatorFeeBP_) {
        if (treasury_ == address(0)) revert ZeroAddress();
        if (platformFeeBP_ + evaluatorFeeBP_ > BPS) revert FeesTooHigh();
        admin = msg.sender;
        platformTreasury = treasury_;
        platformFeeBP = platformFeeBP_;
        evaluatorFeeBP = evaluatorFeeBP_;
    }

    // ----- admin -----

    function pause() external onlyAdmin {
        if (paused) revert EnforcedPause();
        paused = true;
        emit Paused(msg.sender);
    }

    function unpause() external onlyAdmin {
        if (!paused) revert ExpectedPause();
        paused = false;
        emit Unpaused(msg.sender);
    }

    function batchDetachHook(uint256[] calldata jobIds) external onlyAdmin {
        for (uint256 i = 0; i < jobIds.length; i++) {
            Job storage job = _job(jobIds[i]);
            address old = job.hook;
            if (old == address(0)) continue;
            job.hook = address(0);
            emit HookDetached(jobIds[i], old);
        }
    }

    /// Admin recovery while paused: refunds what is left of the escrow to `to`.
    function forceRefund(uint256 jobId, address to) external onlyAdmin nonReentrant {
        if (!paused) revert ExpectedPause();
        if (to == address(0)) revert ZeroAddress();
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Funded && job.status != JobStatus.Submitted) {
            revert WrongStatus();
        }
        delete pendingClaimHash[jobId];
        job.status = JobStatus.Expired;
        uint256 amount = job.budget - job.settledAmount;
        if (amount > 0) {
            TokenTransfer.pay(job.paymentToken, to, amount);
            emit Refunded(jobId, to, amount);
        }
        emit JobExpired(jobId);
    }

    // ----- lifecycle -----

    function createJob(
        address provider,
        address evaluator,
        uint48 expiredAt,
        string calldata description,
        address hook,
        uint256 providerAgentId
    ) external whenNotPaused nonReentrant returns (uint256) {
        return _createJob(provider, evaluator, expiredAt, description, hook, providerAgentId);
    }

    function createJob(
        address provider,
        address evaluator,
        uint48 expiredAt,
        string calldata description,
        address hook,
        uint256 providerAgentId,
        bytes calldata
    ) external whenNotPaused nonReentrant returns (uint256) {
        return _createJob(provider, evaluator, expiredAt, description, hook, providerAgentId);
    }

    function setProvider(uint256 jobId, address provider, uint256 agentId, bytes calldata data)
        external
        whenNotPaused
        nonReentrant
    {
        Job storage job = _openJob(jobId);
        if (msg.sender != job.client) revert Unauthorized();
        if (job.provider != address(0)) revert WrongStatus();
        if (provider == address(0)) revert ZeroAddress();
        if (provider == job.client) revert ClientCannotBeProvider();
        if (provider == job.evaluator) revert ProviderCannotBeEvaluator();
        _before(job, jobId, this.setProvider.selector, data);
        job.provider = provider;
        job.providerAgentId = agentId;
        emit ProviderSet(jobId, msg.sender, provider, agentId);
    }

    function setPayoutReceiver(uint256 jobId, address receiver, bytes calldata data)
        external
        whenNotPaused
        nonReentrant
    {
        Job storage job = _openJob(jobId);
        if (msg.sender != job.provider) revert Unauthorized();
        if (receiver == address(this) || (receiver != address(0) && receiver == job.paymentToken))
        {
            revert InvalidReceiver();
        }
        _before(job, jobId, this.setPayoutReceiver.selector, data);
        job.payoutReceiver = receiver;
        emit PayoutReceiverSet(jobId, msg.sender, receiver);
    }

    function setBudget(uint256 jobId, address token, uint256 amount, bytes calldata data)
        external
        whenNotPaused
        nonReentrant
    {
        Job storage job = _openJob(jobId);
        if (msg.sender != job.provider) revert Unauthorized();
        if (token == address(0)) revert ZeroAddress();
        if (job.payoutReceiver == token) revert InvalidReceiver();
        _before(job, jobId, this.setBudget.selector, data);
        job.paymentToken = token;
        job.budget = amount;
        emit BudgetSet(jobId, msg.sender, token, amount);
    }

    function fund(uint256 jobId, address expectedToken, uint256 expectedBudget, bytes calldata data)
        external
        whenNotPaused
        nonReentrant
    {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus();
        if (msg.sender != job.client) revert Unauthorized();
        if (job.provider == address(0)) revert ProviderNotSet();
        if (block.timestamp >= job.expiredAt) revert WrongStatus();
        if (job.paymentToken != expectedToken) revert PaymentTokenMismatch();
        if (job.budget != expectedBudget) revert BudgetMismatch();
        _before(job, jobId, this.fund.selector, data);
        job.status = JobStatus.Funded;
        TokenTransfer.pull(job.paymentToken, msg.sender, job.budget);
        emit JobFunded(jobId, msg.sender, job.budget);
    }

    function submit(uint256 jobId, bytes32 deliverable, bytes calldata data)
        external
        whenNotPaused
        nonReentrant
    {
        Job storage job = _job(jobId);
        bool unfundedFree = job.status == JobStatus.Open && job.budget == 0;
        if (job.status != JobStatus.Funded && !unfundedFree) revert WrongStatus();
        if (block.timestamp >= job.expiredAt) revert WrongStatus();
        if (msg.sender != job.provider) revert Unauthorized();
        if (pendingClaimHash[jobId] != bytes32(0)) {
            delete pendingClaimHash[jobId];
            emit ClaimRejected(jobId, msg.sender, bytes32("superseded-by-submit"));
        }
        _before(job, jobId, this.submit.selector, data);
        job.status = JobStatus.Submitted;
        job.submittedAt = uint48(block.timestamp);
        emit JobSubmitted(jobId, msg.sender, deliverable);
    }

    function complete(uint256 jobId, bytes32 reason, bytes calldata data)
        external
        whenNotPaused
        nonReentrant
    {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Submitted) revert WrongStatus();
        if (msg.sender != job.evaluator) revert Unauthorized();
        _before(job, jobId, this.complete.selector, data);
        job.status = JobStatus.Completed;
        _distribute(jobId, job, job.budget - job.settledAmount);
        emit JobCompleted(jobId, msg.sender, reason);
    }

    function reject(uint256 jobId, bytes32 reason, bytes calldata data)
        external
        whenNotPaused
        nonReentrant
    {
        Job storage job = _job(jobId);
        JobStatus prev = job.status;
        if (prev == JobStatus.Open) {
            if (msg.sender != job.client && msg.sender != job.provider) revert Unauthorized();
        } else if (prev == JobStatus.Funded || prev == JobStatus.Submitted) {
            if (msg.sender != job.evaluator) revert Unauthorized();
        } else {
            revert WrongStatus();
        }
        if (pendingClaimHash[jobId] != bytes32(0)) {
            delete pendingClaimHash[jobId];
            emit ClaimRejected(jobId, msg.sender, reason);
        }
        _before(job, jobId, this.reject.selector, data);
        job.status = JobStatus.Rejected;
        _refund(jobId, job, prev);
        emit JobRejected(jobId, msg.sender, reason);
    }

    /// Permissionless: the keeper's action once a job's deadline (and grace) has passed.
    function claimRefund(uint256 jobId, bytes calldata data) external whenNotPaused nonReentrant {
        Job storage job = _job(jobId);
        JobStatus prev = job.status;
        if (prev != JobStatus.Open && prev != JobStatus.Funded && prev != JobStatus.Submitted) {
            revert WrongStatus();
        }
        if (prev == JobStatus.Submitted) {
            if (block.timestamp < uint256(job.expiredAt) + EVALUATION_GRACE_PERIOD) {
                revert GracePeriodActive();
            }
        } else if (pendingClaimHash[jobId] != bytes32(0)) {
            revert PendingClaimExists();
        } else if (block.timestamp < job.expiredAt) {
            revert WrongStatus();
        }
        _before(job, jobId, this.claimRefund.selector, data);
        job.status = JobStatus.Expired;
        _refund(jobId, job, prev);
        emit JobExpired(jobId);
    }

    // ----- partial settlement -----

    function submitClaim(
        uint256 jobId,
        uint256 cumulativeAmount,
        bytes32 deliverable,
        bytes calldata optParams
    ) external whenNotPaused nonReentrant {
        Job storage job = _job(jobId);
        if (msg.sender != job.provider) revert Unauthorized();
        if (job.status != JobStatus.Funded) revert WrongStatus();
        if (block.timestamp >= job.expiredAt) revert WrongStatus();
        if (deliverable == bytes32(0)) revert EmptyDeliverable();
        if (pendingClaimHash[jobId] != bytes32(0)) revert PendingClaimExists();
        uint256 delta = _delta(job, cumulativeAmount);
        _before(job, jobId, this.submitClaim.selector, optParams);
        pendingClaimHash[jobId] = _claimHash(cumulativeAmount, deliverable, optParams);
        emit ClaimSubmitted(jobId, msg.sender, cumulativeAmount, delta, deliverable, optParams);
    }

    function settleClaim(
        uint256 jobId,
        uint256 cumulativeAmount,
        bytes32 deliverable,
        bytes calldata optParams
    ) external whenNotPaused nonReentrant {
        Job storage job = _job(jobId);
        if (msg.sender != job.client) revert Unauthorized();
        if (job.status != JobStatus.Funded) revert WrongStatus();
        if (block.timestamp >= job.expiredAt) revert WrongStatus();
        uint256 delta = _delta(job, cumulativeAmount);
        _before(job, jobId, this.settleClaim.selector, optParams);
        job.settledAmount = cumulativeAmount;
        _distribute(jobId, job, delta);
        emit Settled(jobId, cumulativeAmount, delta);
        emit ClaimSettled(jobId, msg.sender, cumulativeAmount, delta, deliverable);
    }

    function approveClaim(
        uint256 jobId,
        uint256 cumulativeAmount,
        bytes32 deliverable,
        bytes calldata optParams
    ) external whenNotPaused nonReentrant {
        Job storage job = _job(jobId);
        if (msg.sender != job.client && msg.sender != job.evaluator) revert Unauthorized();
        if (job.status != JobStatus.Funded) revert WrongStatus();
        _matchPending(jobId, cumulativeAmount, deliverable, optParams);
        uint256 delta = _delta(job, cumulativeAmount);
        _before(job, jobId, this.approveClaim.selector, optParams);
        delete pendingClaimHash[jobId];
        job.settledAmount = cumulativeAmount;
        _distribute(jobId, job, delta);
        emit Settled(jobId, cumulativeAmount, delta);
        emit ClaimApproved(jobId, msg.sender, cumulativeAmount, delta, deliverable);
    }

    function rejectClaim(
        uint256 jobId,
        uint256 cumulativeAmount,
        bytes32 deliverable,
        bytes32 reason,
        bytes calldata optParams
    ) external whenNotPaused nonReentrant {
        Job storage job = _job(jobId);
        if (msg.sender != job.client && msg.sender != job.evaluator && msg.sender != job.provider)
        {
            revert Unauthorized();
        }
        if (job.status != JobStatus.Funded) revert WrongStatus();
        _matchPending(jobId, cumulativeAmount, deliverable, optParams);
        _before(job, jobId, this.rejectClaim.selector, optParams);
        delete pendingClaimHash[jobId];
        emit ClaimRejected(jobId, msg.sender, reason);
    }

    function getJob(uint256 jobId) external view returns (Job memory) {
        return _jobs[jobId];
    }

    // ----- internals -----

    function _createJob(
        address provider,
        address evaluator,
        uint48 expiredAt,
        string calldata description,
        address hook,
        uint256 providerAgentId
    ) private returns (uint256 jobId) {
        if (expiredAt <= block.timestamp + 5 minutes) revert ExpiryTooShort();
        if (msg.sender == provider) revert ClientCannotBeProvider();
        if (evaluator == address(0)) revert ZeroAddress();
        if (evaluator == provider) revert ProviderCannotBeEvaluator();
        jobId = ++jobCounter;
        Job storage job = _jobs[jobId];
        job.client = msg.sender;
        job.provider = provider;
        job.expiredAt = expiredAt;
        job.evaluator = evaluator;
        job.hook = hook;
        job.providerAgentId = provider != address(0) ? providerAgentId : 0;
        job.description = description;
        emit JobCreated(jobId, msg.sender, provider, evaluator, expiredAt, hook);
    }

    function _job(uint256 jobId) private view returns (Job storage) {
        if (jobId == 0 || jobId > jobCounter) revert InvalidJob();
        return _jobs[jobId];
    }

    function _openJob(uint256 jobId) private view returns (Job storage job) {
        job = _job(jobId);
        if (job.status != JobStatus.Open || block.timestamp >= job.expiredAt) revert WrongStatus();
    }

    function _before(Job storage job, uint256 jobId, bytes4 selector, bytes calldata data)
        private
    {
        if (job.hook != address(0)) {
            IERC8183Hook(job.hook).beforeAction(jobId, selector, abi.encode(msg.sender, data));
        }
    }

    function _delta(Job storage job, uint256 cumulativeAmount) private view returns (uint256) {
        if (cumulativeAmount <= job.settledAmount) revert NoNewSettlement();
        if (cumulativeAmount > job.budget) revert ExceedsBudget();
        return cumulativeAmount - job.settledAmount;
    }

    function _claimHash(uint256 cumulativeAmount, bytes32 deliverable, bytes calldata optParams)
        private
        pure
        returns (bytes32)
    {
        return keccak256(abi.encode(cumulativeAmount, deliverable, keccak256(optParams)));
    }

    function _matchPending(
        uint256 jobId,
        uint256 cumulativeAmount,
        bytes32 deliverable,
        bytes calldata optParams
    ) private view {
        bytes32 stored = pendingClaimHash[jobId];
        if (stored == bytes32(0) || stored != _claimHash(cumulativeAmount, deliverable, optParams))
        {
            revert NoPendingClaim();
        }
    }

    function _refund(uint256 jobId, Job storage job, JobStatus prev) private {
        uint256 amount = job.budget - job.settledAmount;
        if (amount > 0 && (prev == JobStatus.Funded || prev == JobStatus.Submitted)) {
            TokenTransfer.pay(job.paymentToken, job.client, amount);
            emit Refunded(jobId, job.client, amount);
        }
    }

    /// Pays `amount` of the escrow out: platform fee, evaluator fee, the rest to the provider
    /// or its payout receiver.
    function _distribute(uint256 jobId, Job storage job, uint256 amount) private {
        uint256 platformFee = (amount * platformFeeBP) / BPS;
        uint256 evalFee = (amount * evaluatorFeeBP) / BPS;
        uint256 net = amount - platformFee - evalFee;
        address token = job.paymentToken;
        if (platformFee > 0) {
            TokenTransfer.pay(token, platformTreasury, platformFee);
            emit PlatformFeePaid(jobId, platformTreasury, platformFee);
        }
        if (evalFee > 0) {
            TokenTransfer.pay(token, job.evaluator, evalFee);
            emit EvaluatorFeePaid(jobId, job.evaluator, evalFee);
        }
        if (net > 0) {
            address recipient = job.payoutReceiver == address(0) ? job.provider : job.payoutReceiver;
            TokenTransfer.pay(token, recipient, net);
            emit PaymentReleased(jobId, recipient, net);
        }
    }
}
