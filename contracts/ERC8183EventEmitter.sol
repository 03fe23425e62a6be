// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// Emits, with caller-chosen arguments, every event of the ERC8183.sol dialect that differs
/// from AgenticCommerce (actor-indexed setters, uint48 expiry, claims, payout receivers,
/// pause and administration), so decoder tests can check each shape against a real log.
/// Kept apart from EventEmitter so each protocol's emitter changes with its own dialects.
contract ERC8183EventEmitter {
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
    event BudgetSet(
        uint256 indexed jobId, address indexed actor, address indexed token, uint256 amount
    );
    event PayoutReceiverSet(
        uint256 indexed jobId, address indexed actor, address indexed payoutReceiver
    );
    event Disbursed(
        uint256 indexed jobId, address indexed receiver, bytes4 selector, uint256 amount
    );
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
    event HookWhitelistUpdated(address indexed hook, bool status);
    event PaymentTokenAllowlistUpdated(address indexed token, bool status);
    event PlatformFeeUpdated(uint256 feeBP, address indexed treasury);
    event EvaluatorFeeUpdated(uint256 feeBP);
    event EmergencyWithdraw(address indexed token, address indexed to, uint256 amount);
    event AuthorizationUsed(address indexed signer, bytes32 indexed nonce);
    event IntentExecuted(address indexed signer, bytes32 indexed nonce);
    event RoleGranted(bytes32 indexed role, address indexed account, address indexed sender);
    event RoleRevoked(bytes32 indexed role, address indexed account, address indexed sender);
    event RoleAdminChanged(
        bytes32 indexed role, bytes32 indexed previousAdminRole, bytes32 indexed newAdminRole
    );
    event Upgraded(address indexed implementation);
    event Initialized(uint64 version);
    event EIP712DomainChanged();

    function emitJobCreated(
        uint256 jobId,
        address client,
        address provider,
        address evaluator,
        uint48 expiredAt,
        address hook
    ) external {
        emit JobCreated(jobId, client, provider, evaluator, expiredAt, hook);
    }

    function emitProviderSet(uint256 jobId, address actor, address provider, uint256 agentId)
        external
    {
        emit ProviderSet(jobId, actor, provider, agentId);
    }

    function emitBudgetSet(uint256 jobId, address actor, address token, uint256 amount) external {
        emit BudgetSet(jobId, actor, token, amount);
    }

    function emitPayoutReceiverSet(uint256 jobId, address actor, address receiver) external {
        emit PayoutReceiverSet(jobId, actor, receiver);
    }

    function emitDisbursed(uint256 jobId, address receiver, bytes4 selector, uint256 amount)
        external
    {
        emit Disbursed(jobId, receiver, selector, amount);
    }

    function emitSettled(uint256 jobId, uint256 cumulativeAmount, uint256 delta) external {
        emit Settled(jobId, cumulativeAmount, delta);
    }

    function emitClaimSubmitted(
        uint256 jobId,
        address provider,
        uint256 cumulativeAmount,
        uint256 delta,
        bytes32 deliverable,
        bytes calldata optParams
    ) external {
        emit ClaimSubmitted(jobId, provider, cumulativeAmount, delta, deliverable, optParams);
    }

    function emitClaimSettled(
        uint256 jobId,
        address settler,
        uint256 cumulativeAmount,
        uint256 delta,
        bytes32 deliverable
    ) external {
        emit ClaimSettled(jobId, settler, cumulativeAmount, delta, deliverable);
    }

    function emitClaimApproved(
        uint256 jobId,
        address approver,
        uint256 cumulativeAmount,
        uint256 delta,
        bytes32 deliverable
    ) external {
        emit ClaimApproved(jobId, approver, cumulativeAmount, delta, deliverable);
    }

    function emitClaimRejected(uint256 jobId, address rejector, bytes32 reason) external {
        emit ClaimRejected(jobId, rejector, reason);
    }

    function emitHookDetached(uint256 jobId, address hook) external {
        emit HookDetached(jobId, hook);
    }

    function emitPaused(address account) external {
        emit Paused(account);
    }

    function emitUnpaused(address account) external {
        emit Unpaused(account);
    }

    function emitHookWhitelistUpdated(address hook, bool status) external {
        emit HookWhitelistUpdated(hook, status);
    }

    function emitPaymentTokenAllowlistUpdated(address token, bool status) external {
        emit PaymentTokenAllowlistUpdated(token, status);
    }

    function emitPlatformFeeUpdated(uint256 feeBP, address treasury) external {
        emit PlatformFeeUpdated(feeBP, treasury);
    }

    function emitEvaluatorFeeUpdated(uint256 feeBP) external {
        emit EvaluatorFeeUpdated(feeBP);
    }

    function emitEmergencyWithdraw(address token, address to, uint256 amount) external {
        emit EmergencyWithdraw(token, to, amount);
    }

    function emitAuthorizationUsed(address signer, bytes32 nonce) external {
        emit AuthorizationUsed(signer, nonce);
    }

    function emitIntentExecuted(address signer, bytes32 nonce) external {
        emit IntentExecuted(signer, nonce);
    }

    function emitRoleGranted(bytes32 role, address account, address sender) external {
        emit RoleGranted(role, account, sender);
    }

    function emitRoleRevoked(bytes32 role, address account, address sender) external {
        emit RoleRevoked(role, account, sender);
    }

    function emitRoleAdminChanged(bytes32 role, bytes32 previousAdminRole, bytes32 newAdminRole)
        external
    {
        emit RoleAdminChanged(role, previousAdminRole, newAdminRole);
    }

    function emitUpgraded(address implementation) external {
        emit Upgraded(implementation);
    }

    function emitInitialized(uint64 version) external {
        emit Initialized(version);
    }

    function emitEIP712DomainChanged() external {
        emit EIP712DomainChanged();
    }
}
