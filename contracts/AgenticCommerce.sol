// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TokenTransfer} from "./IERC20Minimal.sol";

/// The reference's job hook (IERC8183Hook, an IERC165): beforeAction may revert to block an
/// action, afterAction runs once the state has changed. Its interface id is the XOR of the two.
interface IAgenticCommerceHook {
    function beforeAction(uint256 jobId, bytes4 selector, bytes calldata data) external;
    function afterAction(uint256 jobId, bytes4 selector, bytes calldata data) external;
}

interface IERC165Minimal {
    function supportsInterface(bytes4 interfaceId) external view returns (bool);
}

/// ERC-8183 job escrow, current reference shape: one ERC-20 payment token per job, a hook
/// address, provider agent ids and a one-hour evaluation grace period on refunds.
///
/// Written for the devnet and the tests from the published interface, not for production.
/// Selectors, events, errors, permissions and deadline rules are the reference's
/// (erc-8183/base-contracts, contracts/AgenticCommerce.sol, its newest version):
/// - errors: InvalidJob for an id that was never created; WrongStatus for a call in the wrong
///   status and for a deadline on the wrong side (fund at or after expiredAt, claimRefund
///   before it, setProvider once a provider is set); ZeroAddress for a missing evaluator,
///   provider, token, treasury or hook; ProviderCannotBeEvaluator (createJob, setProvider);
///   HookNotWhitelisted, InvalidHook; GracePeriodActive, ProviderNotSet, BudgetMismatch,
///   FeesTooHigh; ZeroBudget is declared and raised by nothing, as there.
/// - checks run in the reference's order: job, status, caller, then the call's own.
/// - deadlines: fund strictly before expiredAt; submit has none (a late submission is
///   accepted); claimRefund from expiredAt, and for a Submitted job from submittedAt + 1 hour.
/// - events in the reference's order: complete emits PlatformFeePaid and EvaluatorFeePaid
///   (each only for a non-zero fee), then JobCompleted, then PaymentReleased (always, 0
///   included); reject and claimRefund emit Refunded (non-zero budget) before
///   JobRejected/JobExpired. fund of a zero budget moves nothing and needs no token.
/// - hooks: createJob takes address(0) or a hook the admin whitelisted (setHookWhitelist,
///   HookWhitelistUpdated) that reports the hook interface through ERC-165. setBudget, fund,
///   submit, complete and reject call beforeAction (which may block them) and afterAction,
///   createJob afterAction only, with the reference's abi.encode data (caller first,
///   optParams last); setProvider and claimRefund call no hook, so no hook can block the
///   keeper's refund. Lifecycle calls are non-reentrant (ReentrancyGuardReentrantCall).
/// - an Open job may be submitted only while its budget is zero; the budget may change until
///   the job is funded; createJob keeps providerAgentId only with a non-zero provider.
/// - claimRefund reproduces the reference's hazard: on an expired Open job it transfers
///   job.budget to the client although nothing was funded.
///
/// Devnet departures, and rules where the interface is silent:
/// - createJob accepts an expiredAt merely in the future (else ExpiryTooShort); the
///   reference's five-minute minimum is not kept, so devnet flows and tests can create short
///   jobs.
/// - no proxy and no roles: the deployer is the one admin (setHookWhitelist, setPlatformFee,
///   setEvaluatorFee); anyone else gets the reference's AccessControlUnauthorizedAccount(
///   caller, ADMIN_ROLE). The constructor sets the treasury and both fees, which the
///   reference's initializer leaves at 0; the setters change them as there.
/// - transfers that fail revert TransferFailed (the reference reverts SafeERC20's error).
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
    bytes32 public constant ADMIN_ROLE = keccak256("ADMIN_ROLE");
    bytes4 private constant HOOK_INTERFACE_ID =
        IAgenticCommerceHook.beforeAction.selector ^ IAgenticCommerceHook.afterAction.selector;

    address public immutable admin;
    address public platformTreasury;
    uint256 public platformFeeBP;
    uint256 public evaluatorFeeBP;
    uint256 public jobCounter;

    mapping(uint256 => Job) public jobs;
    mapping(address => bool) public whitelistedHooks;
    bool private _entered;

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
    event HookWhitelistUpdated(address indexed hook, bool status);
    event PlatformFeeSet(uint256 feeBP, address indexed treasury);
    event EvaluatorFeeSet(uint256 feeBP);

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
    error HookNotWhitelisted();
    error InvalidHook();
    error ZeroBudget(); // declared by the reference, raised by none of its functions
    error AccessControlUnauthorizedAccount(address account, bytes32 neededRole);
    error ReentrancyGuardReentrantCall();

    modifier nonReentrant() {
        if (_entered) revert ReentrancyGuardReentrantCall();
        _entered = true;
        _;
        _entered = false;
    }

    constructor(address treasury_, uint256 platformFeeBps_, uint256 evaluatorFeeBps_) {
        if (treasury_ == address(0)) revert ZeroAddress();
        if (platformFeeBps_ + evaluatorFeeBps_ > BPS) revert FeesTooHigh();
        admin = msg.sender;
        whitelistedHooks[address(0)] = true; // no hook: always allowed, as in the reference
        platformTreasury = treasury_;
        platformFeeBP = platformFeeBps_;
        evaluatorFeeBP = evaluatorFeeBps_;
    }

    function setPlatformFee(uint256 feeBP_, address treasury_) external {
        _onlyAdmin();
        if (treasury_ == address(0)) revert ZeroAddress();
        if (feeBP_ + evaluatorFeeBP > BPS) revert FeesTooHigh();
        platformFeeBP = feeBP_;
        platformTreasury = treasury_;
        emit PlatformFeeSet(feeBP_, treasury_);
    }

    function setEvaluatorFee(uint256 feeBP_) external {
        _onlyAdmin();
        if (feeBP_ + platformFeeBP > BPS) revert FeesTooHigh();
        evaluatorFeeBP = feeBP_;
        emit EvaluatorFeeSet(feeBP_);
    }

    function setHookWhitelist(address hook, bool status) external {
        _onlyAdmin();
        if (hook == address(0)) revert ZeroAddress();
        whitelistedHooks[hook] = status;
        emit HookWhitelistUpdated(hook, status);
    }

    function createJob(
        address provider,
        address evaluator,
        uint256 expiredAt,
        string calldata description,
        address hook,
        uint256 providerAgentId
    ) external nonReentrant returns (uint256 jobId) {
        if (evaluator == address(0)) revert ZeroAddress();
        if (evaluator == provider) revert ProviderCannotBeEvaluator();
        if (expiredAt <= block.timestamp) revert ExpiryTooShort();
        // no hook is allowed by the rule itself too: behind a proxy the constructor's entry
        // for address(0) is in the implementation's storage, not the proxy's
        if (hook != address(0) && !whitelistedHooks[hook]) revert HookNotWhitelisted();
        if (hook != address(0) && !_isHook(hook)) revert InvalidHook();
        jobId = ++jobCounter;
        Job storage job = jobs[jobId];
        job.id = jobId;
        job.client = msg.sender;
        job.provider = provider;
        job.evaluator = evaluator;
        job.description = description;
        job.expiredAt = expiredAt;
        job.hook = hook;
        // As in the reference, an agent id is kept only with a provider.
        if (provider != address(0)) job.providerAgentId = providerAgentId;
        emit JobCreated(jobId, msg.sender, provider, evaluator, expiredAt, hook);
        if (hook != address(0)) {
            IAgenticCommerceHook(hook).afterAction(
                jobId, msg.sig, abi.encode(msg.sender, provider, evaluator)
            );
        }
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

    function setBudget(uint256 jobId, address token, uint256 amount, bytes calldata optParams)
        external
        nonReentrant
    {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus();
        if (msg.sender != job.client && msg.sender != job.provider) revert Unauthorized();
        if (token == address(0)) revert ZeroAddress();
        bytes memory data = abi.encode(msg.sender, token, amount, optParams);
        _beforeHook(job, jobId, data);
        job.paymentToken = token;
        job.budget = amount;
        emit BudgetSet(jobId, token, amount);
        _afterHook(job, jobId, data);
    }

    function fund(uint256 jobId, uint256 expectedBudget, bytes calldata optParams)
        external
        nonReentrant
    {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus();
        if (msg.sender != job.client) revert Unauthorized();
        if (job.provider == address(0)) revert ProviderNotSet();
        if (job.budget != expectedBudget) revert BudgetMismatch();
        if (block.timestamp >= job.expiredAt) revert WrongStatus();
        bytes memory data = abi.encode(msg.sender, optParams);
        _beforeHook(job, jobId, data);
        job.status = JobStatus.Funded;
        // A zero budget moves nothing, so a job whose budget was never set (no token) funds.
        if (job.budget > 0) TokenTransfer.pull(job.paymentToken, msg.sender, job.budget);
        emit JobFunded(jobId, msg.sender, job.budget);
        _afterHook(job, jobId, data);
    }

    function submit(uint256 jobId, bytes32 deliverable, bytes calldata optParams)
        external
        nonReentrant
    {
        Job storage job = _job(jobId);
        bool unfundedFree = job.status == JobStatus.Open && job.budget == 0;
        if (job.status != JobStatus.Funded && !unfundedFree) revert WrongStatus();
        if (msg.sender != job.provider) revert Unauthorized();
        // As in the reference, submit has no deadline: a late submission is allowed and
        // starts the evaluation grace period that claimRefund waits for.
        bytes memory data = abi.encode(msg.sender, deliverable, optParams);
        _beforeHook(job, jobId, data);
        job.status = JobStatus.Submitted;
        job.submittedAt = block.timestamp;
        emit JobSubmitted(jobId, msg.sender, deliverable);
        _afterHook(job, jobId, data);
    }

    function complete(uint256 jobId, bytes32 reason, bytes calldata optParams)
        external
        nonReentrant
    {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Submitted) revert WrongStatus();
        if (msg.sender != job.evaluator) revert Unauthorized();
        bytes memory data = abi.encode(msg.sender, reason, optParams);
        _beforeHook(job, jobId, data);
        job.status = JobStatus.Completed;
        uint256 budget = job.budget;
        uint256 platformFee = (budget * platformFeeBP) / BPS;
        uint256 evaluatorFee = (budget * evaluatorFeeBP) / BPS;
        uint256 net = budget - platformFee - evaluatorFee;
        address token = job.paymentToken;
        // The reference's order: fees, then JobCompleted, then the provider's payment.
        if (platformFee > 0) {
            address treasury = platformTreasury;
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
        _afterHook(job, jobId, data);
    }

    function reject(uint256 jobId, bytes32 reason, bytes calldata optParams)
        external
        nonReentrant
    {
        Job storage job = _job(jobId);
        JobStatus status = job.status;
        if (status == JobStatus.Open) {
            if (msg.sender != job.client) revert Unauthorized();
        } else if (status == JobStatus.Funded || status == JobStatus.Submitted) {
            if (msg.sender != job.evaluator) revert Unauthorized();
        } else {
            revert WrongStatus();
        }
        bytes memory data = abi.encode(msg.sender, reason, optParams);
        _beforeHook(job, jobId, data);
        job.status = JobStatus.Rejected;
        if (status != JobStatus.Open && job.budget > 0) {
            TokenTransfer.pay(job.paymentToken, job.client, job.budget);
            emit Refunded(jobId, job.client, job.budget);
        }
        emit JobRejected(jobId, msg.sender, reason);
        _afterHook(job, jobId, data);
    }

    /// Permissionless: the keeper's action once a job's deadline has passed.
    function claimRefund(uint256 jobId) external nonReentrant {
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
        return jobs[jobId];
    }

    function _onlyAdmin() private view {
        if (msg.sender != admin) revert AccessControlUnauthorizedAccount(msg.sender, ADMIN_ROLE);
    }

    function _beforeHook(Job storage job, uint256 jobId, bytes memory data) private {
        if (job.hook != address(0)) {
            IAgenticCommerceHook(job.hook).beforeAction(jobId, msg.sig, data);
        }
    }

    function _afterHook(Job storage job, uint256 jobId, bytes memory data) private {
        if (job.hook != address(0)) {
            IAgenticCommerceHook(job.hook).afterAction(jobId, msg.sig, data);
        }
    }

    /// ERC-165 detection: the hook answers true for IERC165 and the hook interface, false for
    /// 0xffffffff; a call that reverts or returns no bool counts as not supported.
    function _isHook(address hook) private view returns (bool) {
        return _supports(hook, type(IERC165Minimal).interfaceId)
            && !_supports(hook, 0xffffffff) && _supports(hook, HOOK_INTERFACE_ID);
    }

    function _supports(address target, bytes4 interfaceId) private view returns (bool) {
        (bool ok, bytes memory ret) = target.staticcall{gas: 30_000}(
            abi.encodeCall(IERC165Minimal.supportsInterface, (interfaceId))
        );
        return ok && ret.length >= 32 && abi.decode(ret, (uint256)) == 1;
    }

    function _job(uint256 jobId) private view returns (Job storage job) {
        if (jobId == 0 || jobId > jobCounter) revert InvalidJob();
        job = jobs[jobId];
    }
}
