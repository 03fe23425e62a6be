// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// An ERC8183 hook whose owner can make beforeAction revert for chosen selectors: the devnet's
/// "misbehaving hook" that blocks claimRefund, the permissionless recovery path, until the
/// escrow admin detaches it (batchDetachHook) or the owner switches it off. It also answers
/// as an IDisburser payout receiver, so the escrow's onDisbursement callback (and its Disbursed
/// event) can be driven on the devnet; blocking its selector makes the payout revert.
contract SwitchableHook {
    address public immutable owner;
    mapping(bytes4 => bool) public blocks;

    error HookBlocked(bytes4 selector);
    error NotOwner();

    constructor() {
        owner = msg.sender;
    }

    function setBlocking(bytes4 selector, bool blocking) external {
        if (msg.sender != owner) revert NotOwner();
        blocks[selector] = blocking;
    }

    function beforeAction(uint256, bytes4 selector, bytes calldata) external view {
        if (blocks[selector]) revert HookBlocked(selector);
    }

    function afterAction(uint256, bytes4, bytes calldata) external pure {}

    function onDisbursement(uint256, bytes4, address, uint256, bytes calldata) external view {
        if (blocks[this.onDisbursement.selector]) revert HookBlocked(this.onDisbursement.selector);
    }

    function supportsInterface(bytes4 interfaceId) external pure returns (bool) {
        // IERC165, the two-function hook interface and IDisburser
        return interfaceId == 0x01ffc9a7
            || interfaceId == (this.beforeAction.selector ^ this.afterAction.selector)
            || interfaceId == this.onDisbursement.selector;
    }
}
