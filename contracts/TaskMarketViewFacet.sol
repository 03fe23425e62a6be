// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TaskMarketBase} from "./TaskMarketBase.sol";

/// Views and owner controls of the devnet diamond: the revision-21 getters, the forwarder
/// registry and pause.
contract TaskMarketViewFacet is TaskMarketBase {
    function getTask(bytes32 taskId) external view returns (Task memory) {
        return _s().tasks[taskId];
    }

    function getTaskEvaluatorConfig(bytes32 taskId)
        external
        view
        returns (TaskEvaluatorConfig memory)
    {
        return _s().evalConfigs[taskId];
    }

    function getTaskVerdict(bytes32 taskId) external view returns (Verdict memory) {
        return _s().verdicts[taskId];
    }

    function requesterNonce(address requester) external view returns (uint256) {
        return _s().requesterNonce[requester];
    }

    function isTrustedForwarder(address addr) external view returns (bool) {
        return _s().trustedForwarders[addr];
    }

    function paused() external view returns (bool) {
        return _s().paused;
    }

    function addForwarder(address forwarder) external {
        AppStorage storage s = _onlyOwner();
        if (forwarder == address(0)) revert InvalidForwarderAddress();
        s.trustedForwarders[forwarder] = true;
        emit ForwarderUpdated(forwarder, true);
    }

    function removeForwarder(address forwarder) external {
        AppStorage storage s = _onlyOwner();
        s.trustedForwarders[forwarder] = false;
        emit ForwarderUpdated(forwarder, false);
    }

    function pause() external {
        _onlyOwner().paused = true;
        emit Paused(msg.sender);
    }

    function unpause() external {
        _onlyOwner().paused = false;
        emit Unpaused(msg.sender);
    }

    function _onlyOwner() private view returns (AppStorage storage s) {
        s = _s();
        if (msg.sender != s.owner) revert NotOwner();
    }
}
