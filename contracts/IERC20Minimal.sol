// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// The slice of ERC-20 the escrows need.
interface IERC20Minimal {
    function transfer(address to, uint256 amount) external returns (bool);
    function transferFrom(address from, address to, uint256 amount) external returns (bool);
    function balanceOf(address account) external view returns (uint256);
}

/// Token moves that also accept tokens returning no bool, and revert loudly otherwise.
library TokenTransfer {
    error TransferFailed();

    function pay(address token, address to, uint256 amount) internal {
        if (amount == 0) return;
        (bool ok, bytes memory ret) =
            token.call(abi.encodeCall(IERC20Minimal.transfer, (to, amount)));
        if (!ok || (ret.length != 0 && !abi.decode(ret, (bool)))) revert TransferFailed();
    }

    function pull(address token, address from, uint256 amount) internal {
        if (amount == 0) return;
        (bool ok, bytes memory ret) =
            token.call(abi.encodeCall(IERC20Minimal.transferFrom, (from, address(this), amount)));
        if (!ok || (ret.length != 0 && !abi.decode(ret, (bool)))) revert TransferFailed();
    }
}
