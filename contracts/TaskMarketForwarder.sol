// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// A devnet stand-in for the ERC-8194 forwarder: relays a call and tells the target who
/// sent it (pgtrSender). The deployed forwarder authenticates signed, paid requests; this
/// one trusts its caller, which is all a devnet of dev keys needs.
contract TaskMarketForwarder {
    address private _current;

    function forward(address target, bytes calldata data) external returns (bytes memory) {
        _current = msg.sender;
        (bool ok, bytes memory ret) = target.call(data);
        _current = address(0);
        if (!ok) {
            assembly {
                revert(add(ret, 32), mload(ret))
            }
        }
        return ret;
    }

    function pgtrSender() external view returns (address) {
        return _current;
    }
}
