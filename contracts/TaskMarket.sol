// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TaskMarketBase} from "./TaskMarketBase.sol";

/// The devnet ERC-8195 task market: a small EIP-2535 style diamond in the shape of the
/// deployed one at revision 21. One address routes each selector to a facet by
/// delegatecall (TaskMarketCoreFacet, TaskMarketEvaluatorFacet, TaskMarketViewFacet);
/// an unrouted selector answers Error("Diamond: function not found"); the loupe answers
/// facetAddress(bytes4), and diamondVersion() the revision.
///
/// The routing is fixed at construction (no diamondCut): the devnet never upgrades.
contract TaskMarket is TaskMarketBase {
    error LengthMismatch();
    error SelectorTaken(bytes4 selector);

    constructor(
        address owner_,
        address usdc_,
        address feeRecipient_,
        uint16 feeBps_,
        address[] memory facets,
        bytes4[][] memory selectors
    ) {
        if (facets.length != selectors.length) revert LengthMismatch();
        if (feeBps_ > BPS) revert FeeBpsTooHigh();
        AppStorage storage s = _s();
        s.owner = owner_;
        s.usdc = usdc_;
        s.feeRecipient = feeRecipient_;
        s.defaultFeeBps = feeBps_;
        for (uint256 i = 0; i < facets.length; ++i) {
            for (uint256 j = 0; j < selectors[i].length; ++j) {
                bytes4 sel = selectors[i][j];
                if (s.facets[sel] != address(0)) revert SelectorTaken(sel);
                s.facets[sel] = facets[i];
            }
        }
    }

    /// The loupe: the facet routing ``selector``, zero when none does.
    function facetAddress(bytes4 selector) external view returns (address) {
        return _s().facets[selector];
    }

    function diamondVersion() external pure returns (uint256) {
        return REVISION;
    }

    fallback() external {
        address facet = _s().facets[msg.sig];
        if (facet == address(0)) revert("Diamond: function not found");
        assembly {
            calldatacopy(0, 0, calldatasize())
            let ok := delegatecall(gas(), facet, 0, calldatasize(), 0, 0)
            returndatacopy(0, 0, returndatasize())
            switch ok
            case 0 { revert(0, returndatasize()) }
            default { return(0, returndatasize()) }
        }
    }
}
