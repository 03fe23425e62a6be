// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TaskMarketBase} from "./TaskMarketBase.sol";

/// The devnet ERC-8195 task market: a small EIP-2535 style diamond in the shape of the
/// deployed one at revision 21. One address routes each selector to a facet by
/// delegatecall (TaskMarketCoreFacet, TaskMarketEvaluatorFacet, TaskMarketViewFacet);
/// an unrouted selector answers Error("Diamond: function not found"); the loupe answers
/// facetAddress(bytes4), and diamondVersion() the revision.
///
/// The owner changes the routing with EIP-2535's diamondCut, which emits DiamondCut as an
/// upgrade of the deployed diamond does. Devnet simplification: no initializer call.
contract TaskMarket is TaskMarketBase {
    enum FacetCutAction {
        Add,
        Replace,
        Remove
    }

    struct FacetCut {
        address facetAddress;
        FacetCutAction action;
        bytes4[] functionSelectors;
    }

    event DiamondCut(FacetCut[] _diamondCut, address _init, bytes _calldata);

    error LengthMismatch();
    error SelectorTaken(bytes4 selector);
    error SelectorNotRouted(bytes4 selector);
    error InvalidCut();

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

    /// Add routes unrouted selectors to a facet, Replace moves routed ones, Remove (facet
    /// zero) unroutes them; ``_init`` must be zero (the devnet runs no initializer).
    function diamondCut(FacetCut[] calldata cuts, address _init, bytes calldata _calldata)
        external
    {
        AppStorage storage s = _s();
        if (msg.sender != s.owner) revert NotOwner();
        if (_init != address(0) || _calldata.length != 0) revert InvalidCut();
        for (uint256 i = 0; i < cuts.length; ++i) {
            FacetCut calldata cut = cuts[i];
            bool removing = cut.action == FacetCutAction.Remove;
            if (removing != (cut.facetAddress == address(0))) revert InvalidCut();
            for (uint256 j = 0; j < cut.functionSelectors.length; ++j) {
                bytes4 sel = cut.functionSelectors[j];
                bool routed = s.facets[sel] != address(0);
                if (cut.action == FacetCutAction.Add && routed) revert SelectorTaken(sel);
                if (cut.action != FacetCutAction.Add && !routed) revert SelectorNotRouted(sel);
                s.facets[sel] = cut.facetAddress;
            }
        }
        emit DiamondCut(cuts, _init, _calldata);
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
