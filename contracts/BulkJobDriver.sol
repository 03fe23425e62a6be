// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// The calls of the ERC8183-shaped escrow the driver makes, as its interface declares them.
interface IBulkEscrow {
    function createJob(
        address provider,
        address evaluator,
        uint48 expiredAt,
        string calldata description,
        address hook,
        uint256 providerAgentId,
        bytes calldata optParams
    ) external returns (uint256);
    function setBudget(uint256 jobId, address token, uint256 amount, bytes calldata optParams)
        external;
    function fund(
        uint256 jobId,
        address expectedToken,
        uint256 expectedBudget,
        bytes calldata optParams
    ) external;
    function submit(uint256 jobId, bytes32 deliverable, bytes calldata optParams) external;
    function complete(uint256 jobId, bytes32 reason, bytes calldata optParams) external;
}

/// The devnet token: anyone may mint.
interface IBulkToken {
    function mint(address to, uint256 amount) external;
    function approve(address spender, uint256 amount) external returns (bool);
}

/// Budget and deliverable are functions of the job id, so the bench can recompute them.
library BulkJobValues {
    function budget(uint256 jobId) internal pure returns (uint256) {
        return 1_000_000 + (jobId % 97) * 10_000;
    }

    function deliverable(uint256 jobId) internal pure returns (bytes32) {
        return keccak256(abi.encode("deliverable", jobId));
    }

    function reason(uint256 jobId) internal pure returns (bytes32) {
        return keccak256(abi.encode("reason", jobId));
    }
}

/// A job party other than the client (the provider, the evaluator): the escrow requires a
/// distinct address for each role, so each is its own contract, driven by the driver only.
contract BulkJobParty {
    address public immutable driver;
    IBulkEscrow public immutable escrow;

    error NotDriver();

    constructor(IBulkEscrow escrow_) {
        driver = msg.sender;
        escrow = escrow_;
    }

    modifier onlyDriver() {
        if (msg.sender != driver) revert NotDriver();
        _;
    }

    /// As the provider: the budget in `token` is set by the provider in this dialect.
    function setBudgets(uint256[] calldata jobIds, address token) external onlyDriver {
        for (uint256 i = 0; i < jobIds.length; i++) {
            escrow.setBudget(jobIds[i], token, BulkJobValues.budget(jobIds[i]), "");
        }
    }

    /// As the provider.
    function submit(uint256[] calldata jobIds) external onlyDriver {
        for (uint256 i = 0; i < jobIds.length; i++) {
            escrow.submit(jobIds[i], BulkJobValues.deliverable(jobIds[i]), "");
        }
    }

    /// As the evaluator.
    function complete(uint256[] calldata jobIds) external onlyDriver {
        for (uint256 i = 0; i < jobIds.length; i++) {
            escrow.complete(jobIds[i], BulkJobValues.reason(jobIds[i]), "");
        }
    }
}

/// Benchmark traffic through the real escrow: the driver is the client of every job and runs
/// one stage of many job lifecycles per call, so the logs come from the escrow as real
/// traffic's would and every view the indexer reads (getJob, description included) answers.
///
/// `step` creates jobs (one per description), then sets budgets, funds, submits and
/// completes the jobs it is given, in that order: passing a job created in the same call to
/// every stage runs its whole lifecycle in one transaction; passing older jobs spreads
/// lifecycles over transactions and blocks. The driver mints the budgets it funds.
contract BulkJobDriver {
    uint48 public constant TTL = 30 days;

    address public immutable owner;
    IBulkEscrow public immutable escrow;
    IBulkToken public immutable token;
    BulkJobParty public immutable provider;
    BulkJobParty public immutable evaluator;

    error NotOwner();

    constructor(IBulkEscrow escrow_, IBulkToken token_) {
        owner = msg.sender;
        escrow = escrow_;
        token = token_;
        provider = new BulkJobParty(escrow_);
        evaluator = new BulkJobParty(escrow_);
        token_.approve(address(escrow_), type(uint256).max);
    }

    function step(
        string[] calldata descriptions,
        uint256[] calldata budgetIds,
        uint256[] calldata fundIds,
        uint256[] calldata submitIds,
        uint256[] calldata completeIds
    ) external {
        if (msg.sender != owner) revert NotOwner();
        _create(descriptions);
        if (budgetIds.length > 0) provider.setBudgets(budgetIds, address(token));
        if (fundIds.length > 0) _fund(fundIds);
        if (submitIds.length > 0) provider.submit(submitIds);
        if (completeIds.length > 0) evaluator.complete(completeIds);
    }

    function _create(string[] calldata descriptions) private {
        uint48 expiredAt = uint48(block.timestamp) + TTL;
        for (uint256 i = 0; i < descriptions.length; i++) {
            escrow.createJob(
                address(provider), address(evaluator), expiredAt, descriptions[i], address(0), i, ""
            );
        }
    }

    function _fund(uint256[] calldata jobIds) private {
        uint256 total = 0;
        for (uint256 i = 0; i < jobIds.length; i++) {
            total += BulkJobValues.budget(jobIds[i]);
        }
        token.mint(address(this), total);
        for (uint256 i = 0; i < jobIds.length; i++) {
            escrow.fund(jobIds[i], address(token), BulkJobValues.budget(jobIds[i]), "");
        }
    }
}
