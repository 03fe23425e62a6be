// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// The Multicall3 surface the keeper batches through (`aggregate3`), plus block getters.
/// Calls run with this contract as msg.sender, which is fine for permissionless actions.
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

    error CallFailed(uint256 index, bytes returnData);

    function aggregate3(Call3[] calldata calls) external payable returns (Result[] memory results) {
        uint256 n = calls.length;
        results = new Result[](n);
        for (uint256 i = 0; i < n; ++i) {
            Call3 calldata c = calls[i];
            (bool ok, bytes memory ret) = c.target.call(c.callData);
            if (!ok && !c.allowFailure) revert CallFailed(i, ret);
            results[i] = Result(ok, ret);
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
