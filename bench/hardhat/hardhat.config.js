// The sparse backfill benchmarks' node (bench/hardhat_node.py): the devnet's chain id,
// block gas limit and well-known dev accounts (the same mnemonic as anvil's), every
// state kept (an archive node), and no per-request log lines.
module.exports = {
  networks: {
    hardhat: {
      chainId: 31337,
      hardfork: "prague",
      blockGasLimit: 300000000,
      allowUnlimitedContractSize: true,
      loggingEnabled: false,
      mining: { auto: true, interval: 0 },
    },
  },
};
