// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// The Multicall3 surface the keeper batches through (`aggregate3`), plus block getters.
/// Calls run with this contract as msg.sender, which is fine for permissionless actions.
///
/// It behaves as the Multicall3 deployed on real chains does, so that what the keeper
/// sees and pays on the devnet is what it sees and pays there: a failure that is not
/// allowed reverts the whole batch with `Error("Multicall3: call failed")`, and each
/// call's result is written into the result the array already allocated instead of a
/// second one (the canonical contract's per-call cost).
contract Multicall3 {
    struct Call3 {
        address target;
        bool allowFailure;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    function aggregate3(Call3[] calldata calls) external payable returns (Result[] memory results) {
        uint256 n = calls.length;
        results = new Result[](n);
        for (uint256 i; i < n; ) {
            Call3 calldata c = calls[i];
            Result memory r = results[i];
            (r.success, r.returnData) = c.target.call(c.callData);
            require(r.success || c.allowFailure, "Multicall3: call failed");
            unchecked {
                ++i;
            }
        }
    }

    function getBlockNumber() external view returns (uint256) {
        return block.number;
    }

    function getCurrentBlockTimestamp() external view returns (uint256) {
        return block.timestamp;
    }

    function getChainId() external view returns (uint256) {
        return block.chainid;
    }
}
