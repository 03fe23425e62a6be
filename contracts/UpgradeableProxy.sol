// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title UpgradeableProxy
/// @notice The devnet's stand-in for the ERC-1967 proxies the deployed escrows sit behind
///         (ERC8183.sol and the task market before its diamond are UUPS upgradeable).
///         Every call is delegated to the implementation in the ERC-1967 slot; the
///         deployer moves it with upgradeTo, which emits OpenZeppelin's
///         Upgraded(address) in the same transaction, as an upgrade does on chain.
///         Devnet simplification: the upgrade is the proxy's own function, not the
///         implementation's (no UUPS proxiableUUID check), and nothing is initialized.
contract UpgradeableProxy {
    event Upgraded(address indexed implementation);

    /// bytes32(uint256(keccak256("eip1967.proxy.implementation")) - 1)
    bytes32 private constant IMPLEMENTATION_SLOT =
        0x360894a13ba1a3210667c828492db98dca3e2076cc3735a920a3ca505d382bbc;

    address private immutable admin;

    constructor(address implementation) {
        admin = msg.sender;
        _setImplementation(implementation);
    }

    function upgradeTo(address implementation) external {
        require(msg.sender == admin, "UpgradeableProxy: not the admin");
        _setImplementation(implementation);
    }

    function _setImplementation(address implementation) private {
        require(implementation.code.length > 0, "UpgradeableProxy: not a contract");
        assembly {
            sstore(IMPLEMENTATION_SLOT, implementation)
        }
        emit Upgraded(implementation);
    }

    fallback() external payable {
        assembly {
            let implementation := sload(IMPLEMENTATION_SLOT)
            calldatacopy(0, 0, calldatasize())
            let ok := delegatecall(gas(), implementation, 0, calldatasize(), 0, 0)
            returndatacopy(0, 0, returndatasize())
            switch ok
            case 0 { revert(0, returndatasize()) }
            default { return(0, returndatasize()) }
        }
    }
}
