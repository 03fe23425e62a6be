// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// The hook interface of the ERC8183 dialect (an IERC165; its interface id is the XOR of the
/// two selectors): beforeAction runs before the state changes and may revert to block the
/// action (claimRefund included), afterAction runs once the action's events are out.
interface IERC8183Hook {
    function beforeAction(uint256 jobId, bytes4 selector, bytes calldata data) external;
    function afterAction(uint256 jobId, bytes4 selector, bytes calldata data) external;
}

/// The optional payout-receiver callback (an IERC165): a receiver contract that reports this
/// interface is told about each net payment once the tokens are in its hands.
interface IDisburser {
    function onDisbursement(
        uint256 jobId,
        bytes4 selector,
        address token,
        uint256 amount,
        bytes calldata data
    ) external;
}

interface IERC165Probe {
    function supportsInterface(bytes4 interfaceId) external view returns (bool);
}

interface IERC20Like {
    function transfer(address to, uint256 amount) external returns (bool);
    function transferFrom(address from, address to, uint256 amount) external returns (bool);
    function balanceOf(address account) external view returns (uint256);
}

/// ERC-8183 job escrow with the interface of the newest reference (`ERC8183.sol` of
/// erc-8183/base-contracts): the same functions and selectors, events (indexing and order
/// within a call), custom errors, permissions, check order and deadline rules. uint48 expiry,
/// actor-indexed setter events, partial settlement through claims (a claim hash once
/// submitted cannot be filed again), payout receivers with the IDisburser callback, a pause
/// switch, an admin-run hook whitelist and payment-token allowlist, hooks called before and
/// after every lifecycle call (after createJob only), claimRefund(uint256,bytes).
///
/// Written for the devnet and the tests from the published interface, not for production.
/// Deliberate devnet departures (nothing the keeper or the indexer reads):
/// - one admin (the deployer, `admin()`) instead of OpenZeppelin roles: the reference's admin
///   functions refuse anyone else with its AccessControlUnauthorizedAccount(caller,
///   ADMIN_ROLE), but there is no grantRole/revokeRole/renounceRole/hasRole/getRoleAdmin/
///   DEFAULT_ADMIN_ROLE/supportsInterface and no role events.
/// - no upgrade proxy, initializer or EIP-712 domain: the constructor takes the treasury and
///   both fees (the reference's initialize(treasury, admin) leaves the fees at 0; the
///   setters change them as there); no Initialized/Upgraded/EIP712DomainChanged events, no
///   upgradeToAndCall/proxiableUUID/eip712Domain.
/// - the reentrancy guard lives in storage, not transient storage (same error).
/// - keeper/devnet/deploy.py allows the devnet's MockUSDC and whitelists its SwitchableHook.
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

    bytes32 public constant ADMIN_ROLE = keccak256("ADMIN_ROLE");
    uint256 public constant EVALUATION_GRACE_PERIOD = 1 hours;
    uint256 private constant BPS = 10_000;
    bytes4 private constant HOOK_INTERFACE_ID =
        IERC8183Hook.beforeAction.selector ^ IERC8183Hook.afterAction.selector;
    bytes4 private constant DISBURSER_INTERFACE_ID = IDisburser.onDisbursement.selector;

    address public immutable admin;
    uint256 public platformFeeBP;
    address public platformTreasury;
    uint256 public evaluatorFeeBP;
    mapping(uint256 => Job) public jobs;
    uint256 public jobCounter;
    mapping(address => bool) public whitelistedHooks;
    mapping(address => bool) public allowedPaymentTokens;
    mapping(uint256 => bytes32) public pendingClaimHash;
    mapping(uint256 => mapping(bytes32 => bool)) public submittedClaimHash;
    bool public paused;
    bool private _entered;

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
    event Disbursed(
        uint256 indexed jobId, address indexed receiver, bytes4 selector, uint256 amount
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
    event HookWhitelistUpdated(address indexed hook, bool status);
    event PaymentTokenAllowlistUpdated(address indexed token, bool status);
    event HookDetached(uint256 indexed jobId, address indexed hook);
    event PlatformFeeUpdated(uint256 feeBP, address indexed treasury);
    event EvaluatorFeeUpdated(uint256 feeBP);
    event EmergencyWithdraw(address indexed token, address indexed to, uint256 amount);
    event Paused(address account);
    event Unpaused(address account);

    error InvalidJob();
    error InvalidHook();
    error InvalidReceiver();
    error WrongStatus();
    error Unauthorized();
    error ZeroAddress();
    error ExpiryTooShort();
    error ProviderNotSet();
    error FeesTooHigh();
    error HookNotWhitelisted();
    error BudgetMismatch();
    error PaymentTokenMismatch();
    error ProviderCannotBeEvaluator();
    error ClientCannotBeProvider();
    error GracePeriodActive();
    error PaymentTokenNotAllowed();
    error UnexpectedFundedAmount();
    error NoNewSettlement();
    error ExceedsBudget();
    error ClaimAlreadySubmitted();
    error EmptyDeliverable();
    error PendingClaimExists();
    error NoPendingClaim();
    error EnforcedPause();
    error ExpectedPause();
    error ReentrancyGuardReentrantCall();
    error AccessControlUnauthorizedAccount(address account, bytes32 neededRole);
    error SafeERC20FailedOperation(address token);

    modifier onlyAdmin() {
        if (msg.sender != admin) revert AccessControlUnauthorizedAccount(msg.sender, ADMIN_ROLE);
        _;
    }

    modifier whenNotPaused() {
        if (paused) revert EnforcedPause();
        _;
    }

    modifier whenPaused() {
        if (!paused) revert ExpectedPause();
        _;
    }

    modifier nonReentrant() {
        if (_entered) revert ReentrancyGuardReentrantCall();
        _entered = true;
        _;
        _entered = false;
    }

    constructor(address treasury_, uint256 platformFeeBP_, uint256 evaluatorFeeBP_) {
        if (treasury_ == address(0)) revert ZeroAddress();
        if (platformFeeBP_ + evaluatorFeeBP_ > BPS) revert FeesTooHigh();
        admin = msg.sender;
        platformTreasury = treasury_;
        platformFeeBP = platformFeeBP_;
        evaluatorFeeBP = evaluatorFeeBP_;
        whitelistedHooks[address(0)] = true;
    }

    // ----- admin (the reference's ADMIN_ROLE functions) -----

    function pause() external onlyAdmin whenNotPaused {
        paused = true;
        emit Paused(msg.sender);
    }

    function unpause() external onlyAdmin whenPaused {
        paused = false;
        emit Unpaused(msg.sender);
    }

    /// Moves any balance out while paused (address(0) = native ether); job state is untouched.
    function emergencyWithdraw(address token, address to, uint256 amount)
        external
        onlyAdmin
        whenPaused
    {
        if (to == address(0)) revert ZeroAddress();
        if (token == address(0)) {
            (bool sent,) = payable(to).call{value: amount}("");
            require(sent, "Transfer failed");
        } else {
            _send(token, to, amount);
        }
        emit EmergencyWithdraw(token, to, amount);
    }

    function setPlatformFee(uint256 feeBP_, address treasury_) external onlyAdmin {
        if (treasury_ == address(0)) revert ZeroAddress();
        if (feeBP_ + evaluatorFeeBP > BPS) revert FeesTooHigh();
        platformFeeBP = feeBP_;
        platformTreasury = treasury_;
        emit PlatformFeeUpdated(feeBP_, treasury_);
    }

    function setEvaluatorFee(uint256 feeBP_) external onlyAdmin {
        if (feeBP_ + platformFeeBP > BPS) revert FeesTooHigh();
        evaluatorFeeBP = feeBP_;
        emit EvaluatorFeeUpdated(feeBP_);
    }

    function setHookWhitelist(address hook, bool status) external onlyAdmin {
        if (hook == address(0)) revert ZeroAddress();
        whitelistedHooks[hook] = status;
        emit HookWhitelistUpdated(hook, status);
    }

    function setPaymentTokenAllowed(address token, bool status) external onlyAdmin {
        if (token == address(0)) revert ZeroAddress();
        allowedPaymentTokens[token] = status;
        emit PaymentTokenAllowlistUpdated(token, status);
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

    // ----- lifecycle -----

    function createJob(
        address provider,
        address evaluator,
        uint48 expiredAt,
        string calldata description,
        address hook,
        uint256 providerAgentId,
        bytes calldata optParams
    ) external whenNotPaused nonReentrant returns (uint256 jobId) {
        if (expiredAt <= block.timestamp + 5 minutes) revert ExpiryTooShort();
        if (msg.sender == provider) revert ClientCannotBeProvider();
        if (evaluator == address(0)) revert ZeroAddress();
        if (evaluator == provider) revert ProviderCannotBeEvaluator();
        if (!whitelistedHooks[hook]) revert HookNotWhitelisted();
        if (hook != address(0) && !_reports(hook, HOOK_INTERFACE_ID)) revert InvalidHook();
        jobId = ++jobCounter;
        Job storage job = jobs[jobId];
        job.client = msg.sender;
        job.provider = provider;
        job.expiredAt = expiredAt;
        job.evaluator = evaluator;
        job.hook = hook;
        // a job without a provider has nobody to attribute an agent id to
        job.providerAgentId = provider != address(0) ? providerAgentId : 0;
        job.description = description;
        emit JobCreated(jobId, msg.sender, provider, evaluator, expiredAt, hook);
        // no beforeAction: the hook is attached by this very call
        _after(
            job,
            jobId,
            this.createJob.selector,
            abi.encode(
                msg.sender, provider, evaluator, expiredAt, hook, job.providerAgentId, optParams
            )
        );
    }

    function setPayoutReceiver(uint256 jobId, address payoutReceiver, bytes calldata optParams)
        external
        whenNotPaused
        nonReentrant
    {
        Job storage job = _openJob(jobId);
        if (msg.sender != job.provider) revert Unauthorized();
        _checkReceiver(payoutReceiver, job.paymentToken);
        bytes memory data = abi.encode(msg.sender, payoutReceiver, optParams);
        _before(job, jobId, this.setPayoutReceiver.selector, data);
        job.payoutReceiver = payoutReceiver;
        emit PayoutReceiverSet(jobId, msg.sender, payoutReceiver);
        _after(job, jobId, this.setPayoutReceiver.selector, data);
    }

    function setProvider(uint256 jobId, address provider, uint256 agentId, bytes calldata optParams)
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
        bytes memory data = abi.encode(msg.sender, provider, agentId, optParams);
        _before(job, jobId, this.setProvider.selector, data);
        job.provider = provider;
        job.providerAgentId = agentId;
        emit ProviderSet(jobId, msg.sender, provider, agentId);
        _after(job, jobId, this.setProvider.selector, data);
    }

    function setBudget(uint256 jobId, address token, uint256 amount, bytes calldata optParams)
        external
        whenNotPaused
        nonReentrant
    {
        Job storage job = _openJob(jobId);
        if (msg.sender != job.provider) revert Unauthorized();
        if (token == address(0)) revert ZeroAddress();
        if (!allowedPaymentTokens[token]) revert PaymentTokenNotAllowed();
        _checkReceiver(job.payoutReceiver, token);
        bytes memory data = abi.encode(msg.sender, token, amount, optParams);
        _before(job, jobId, this.setBudget.selector, data);
        job.paymentToken = token;
        job.budget = amount;
        emit BudgetSet(jobId, msg.sender, token, amount);
        _after(job, jobId, this.setBudget.selector, data);
    }

    function fund(
        uint256 jobId,
        address expectedToken,
        uint256 expectedBudget,
        bytes calldata optParams
    ) external whenNotPaused nonReentrant {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus();
        if (msg.sender != job.client) revert Unauthorized();
        if (job.provider == address(0)) revert ProviderNotSet();
        if (block.timestamp >= job.expiredAt) revert WrongStatus();
        if (job.paymentToken != expectedToken) revert PaymentTokenMismatch();
        if (job.budget != expectedBudget) revert BudgetMismatch();
        bytes memory data = abi.encode(msg.sender, optParams);
        _before(job, jobId, this.fund.selector, data);
        job.status = JobStatus.Funded;
        if (job.budget > 0) {
            // the escrow must hold exactly the budget (no fee-on-transfer or rebasing token)
            uint256 held = IERC20Like(job.paymentToken).balanceOf(address(this));
            _pull(job.paymentToken, msg.sender, job.budget);
            uint256 received = IERC20Like(job.paymentToken).balanceOf(address(this)) - held;
            if (received != job.budget) revert UnexpectedFundedAmount();
        }
        emit JobFunded(jobId, msg.sender, job.budget);
        _after(job, jobId, this.fund.selector, data);
    }

    function submit(uint256 jobId, bytes32 deliverable, bytes calldata optParams)
        external
        whenNotPaused
        nonReentrant
    {
        Job storage job = _job(jobId);
        bool unfundedFree = job.status == JobStatus.Open && job.budget == 0;
        if (job.status != JobStatus.Funded && !unfundedFree) revert WrongStatus();
        if (block.timestamp >= job.expiredAt) revert WrongStatus();
        if (msg.sender != job.provider) revert Unauthorized();
        bytes memory data = abi.encode(msg.sender, deliverable, optParams);
        if (pendingClaimHash[jobId] != bytes32(0)) {
            // the final submission supersedes a pending claim, before the hook sees it
            delete pendingClaimHash[jobId];
            emit ClaimRejected(jobId, msg.sender, bytes32("superseded-by-submit"));
        }
        _before(job, jobId, this.submit.selector, data);
        job.status = JobStatus.Submitted;
        job.submittedAt = uint48(block.timestamp);
        emit JobSubmitted(jobId, msg.sender, deliverable);
        _after(job, jobId, this.submit.selector, data);
    }

    function complete(uint256 jobId, bytes32 reason, bytes calldata optParams)
        external
        whenNotPaused
        nonReentrant
    {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Submitted) revert WrongStatus();
        if (msg.sender != job.evaluator) revert Unauthorized();
        bytes memory data = abi.encode(msg.sender, reason, optParams);
        _before(job, jobId, this.complete.selector, data);
        job.status = JobStatus.Completed;
        _distribute(jobId, job, job.budget - job.settledAmount, this.complete.selector, optParams);
        emit JobCompleted(jobId, msg.sender, reason);
        _after(job, jobId, this.complete.selector, data);
    }

    function reject(uint256 jobId, bytes32 reason, bytes calldata optParams)
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
        bytes memory data = abi.encode(msg.sender, reason, optParams);
        if (pendingClaimHash[jobId] != bytes32(0)) {
            delete pendingClaimHash[jobId];
            emit ClaimRejected(jobId, msg.sender, reason);
        }
        _before(job, jobId, this.reject.selector, data);
        job.status = JobStatus.Rejected;
        _refund(jobId, job, prev);
        emit JobRejected(jobId, msg.sender, reason);
        _after(job, jobId, this.reject.selector, data);
    }

    /// Permissionless: the keeper's action once a job's deadline (and grace) has passed.
    function claimRefund(uint256 jobId, bytes calldata optParams)
        external
        whenNotPaused
        nonReentrant
    {
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
        bytes memory data = abi.encode(msg.sender, optParams);
        _before(job, jobId, this.claimRefund.selector, data);
        job.status = JobStatus.Expired;
        _refund(jobId, job, prev);
        emit JobExpired(jobId);
        _after(job, jobId, this.claimRefund.selector, data);
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
        bytes memory data = abi.encode(msg.sender, cumulativeAmount, deliverable, optParams);
        _before(job, jobId, this.submitClaim.selector, data);
        bytes32 claim = _claimHash(cumulativeAmount, deliverable, optParams);
        // a claim once filed stays spent, even after its rejection
        if (submittedClaimHash[jobId][claim]) revert ClaimAlreadySubmitted();
        submittedClaimHash[jobId][claim] = true;
        pendingClaimHash[jobId] = claim;
        emit ClaimSubmitted(jobId, msg.sender, cumulativeAmount, delta, deliverable, optParams);
        _after(job, jobId, this.submitClaim.selector, data);
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
        bytes memory data = abi.encode(msg.sender, cumulativeAmount, deliverable, optParams);
        _before(job, jobId, this.settleClaim.selector, data);
        job.settledAmount = cumulativeAmount;
        _distribute(jobId, job, delta, this.settleClaim.selector, optParams);
        emit Settled(jobId, cumulativeAmount, delta);
        emit ClaimSettled(jobId, msg.sender, cumulativeAmount, delta, deliverable);
        _after(job, jobId, this.settleClaim.selector, data);
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
        bytes memory data = abi.encode(msg.sender, cumulativeAmount, deliverable, optParams);
        _before(job, jobId, this.approveClaim.selector, data);
        delete pendingClaimHash[jobId];
        job.settledAmount = cumulativeAmount;
        _distribute(jobId, job, delta, this.approveClaim.selector, optParams);
        emit Settled(jobId, cumulativeAmount, delta);
        emit ClaimApproved(jobId, msg.sender, cumulativeAmount, delta, deliverable);
        _after(job, jobId, this.approveClaim.selector, data);
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
        bytes memory data =
            abi.encode(msg.sender, cumulativeAmount, deliverable, reason, optParams);
        _before(job, jobId, this.rejectClaim.selector, data);
        delete pendingClaimHash[jobId];
        emit ClaimRejected(jobId, msg.sender, reason);
        _after(job, jobId, this.rejectClaim.selector, data);
    }

    function getJob(uint256 jobId) external view returns (Job memory) {
        return jobs[jobId];
    }

    // ----- internals -----

    function _job(uint256 jobId) private view returns (Job storage) {
        if (jobId == 0 || jobId > jobCounter) revert InvalidJob();
        return jobs[jobId];
    }

    /// The setters' common gate: an existing, Open job before its expiredAt.
    function _openJob(uint256 jobId) private view returns (Job storage job) {
        job = _job(jobId);
        if (job.status != JobStatus.Open || block.timestamp >= job.expiredAt) revert WrongStatus();
    }

    function _checkReceiver(address receiver, address token) private view {
        if (receiver == address(this)) revert InvalidReceiver();
        if (receiver != address(0) && receiver == token) revert InvalidReceiver();
    }

    function _before(Job storage job, uint256 jobId, bytes4 selector, bytes memory data) private {
        address hook = job.hook;
        if (hook != address(0)) IERC8183Hook(hook).beforeAction(jobId, selector, data);
    }

    function _after(Job storage job, uint256 jobId, bytes4 selector, bytes memory data) private {
        address hook = job.hook;
        if (hook != address(0)) IERC8183Hook(hook).afterAction(jobId, selector, data);
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

    /// What is left of the escrow goes back to the client, if the job was ever funded.
    function _refund(uint256 jobId, Job storage job, JobStatus prev) private {
        uint256 amount = job.budget - job.settledAmount;
        if (amount > 0 && (prev == JobStatus.Funded || prev == JobStatus.Submitted)) {
            _send(job.paymentToken, job.client, amount);
            emit Refunded(jobId, job.client, amount);
        }
    }

    /// Pays `amount` of the escrow out: platform fee, evaluator fee (each when non-zero),
    /// then the net to the provider or its payout receiver, which an IDisburser hears about.
    function _distribute(
        uint256 jobId,
        Job storage job,
        uint256 amount,
        bytes4 selector,
        bytes calldata optParams
    ) private {
        uint256 platformFee = (amount * platformFeeBP) / BPS;
        uint256 evalFee = (amount * evaluatorFeeBP) / BPS;
        uint256 net = amount - platformFee - evalFee;
        address token = job.paymentToken;
        if (platformFee > 0) {
            _send(token, platformTreasury, platformFee);
            emit PlatformFeePaid(jobId, platformTreasury, platformFee);
        }
        if (evalFee > 0) {
            _send(token, job.evaluator, evalFee);
            emit EvaluatorFeePaid(jobId, job.evaluator, evalFee);
        }
        if (net == 0) return;
        address recipient = job.payoutReceiver == address(0) ? job.provider : job.payoutReceiver;
        _send(token, recipient, net);
        emit PaymentReleased(jobId, recipient, net);
        if (recipient.code.length > 0 && _reports(recipient, DISBURSER_INTERFACE_ID)) {
            IDisburser(recipient).onDisbursement(jobId, selector, token, net, optParams);
            emit Disbursed(jobId, recipient, selector, net);
        }
    }

    /// ERC-165 detection: true for IERC165 and `interfaceId`, false for 0xffffffff; a probe
    /// that reverts or answers no word counts as false.
    function _reports(address target, bytes4 interfaceId) private view returns (bool) {
        return _answers(target, 0x01ffc9a7) && !_answers(target, 0xffffffff)
            && _answers(target, interfaceId);
    }

    function _answers(address target, bytes4 interfaceId) private view returns (bool) {
        (bool ok, bytes memory ret) = target.staticcall{gas: 30_000}(
            abi.encodeCall(IERC165Probe.supportsInterface, (interfaceId))
        );
        return ok && ret.length >= 32 && abi.decode(ret, (uint256)) != 0;
    }

    function _send(address token, address to, uint256 amount) private {
        _tokenCall(token, abi.encodeCall(IERC20Like.transfer, (to, amount)));
    }

    function _pull(address token, address from, uint256 amount) private {
        _tokenCall(token, abi.encodeCall(IERC20Like.transferFrom, (from, address(this), amount)));
    }

    /// A token call that passes the token's own revert on, and fails with
    /// SafeERC20FailedOperation on `false` or on silence from an address without code.
    function _tokenCall(address token, bytes memory call) private {
        (bool ok, bytes memory ret) = token.call(call);
        if (!ok) {
            assembly {
                revert(add(ret, 32), mload(ret))
            }
        }
        bool fine = ret.length == 0 ? token.code.length > 0 : abi.decode(ret, (bool));
        if (!fine) revert SafeERC20FailedOperation(token);
    }
}
