// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TokenTransfer} from "./IERC20Minimal.sol";

interface IPgtrSender {
    function pgtrSender() external view returns (address);
}

/// The task market as one contract, before the diamond and before evaluators: the shape
/// deployed behind a UUPS proxy first. Kept so the keeper's detection and refunds are
/// tested against what such a deployment answers: refundExpired(bytes32) and no
/// finalizeVerdict, five-argument TaskCreated (expiryTime before mode, nothing indexed
/// but the id and the requester), TaskAccepted, and Error(string) reverts instead of
/// custom errors.
///
/// Written for the devnet and the tests, not for production; only the functions the
/// keeper and its tests touch. As deployed:
/// - every mutating call but refundExpired comes through a trusted forwarder, the actor
///   being the forwarder's pgtrSender(); the reward is in the contract before createTask
///   (the forwarder moves it), nothing is pulled;
/// - ids are keccak256(chainid, this contract, requester, the requester's nonce);
/// - refundExpired: anyone, now > expiryTime, status not Accepted nor Cancelled. It does
///   not treat Expired as final: a second call pays the reward again out of the other
///   tasks' escrow (the hazard revision 16 of the diamond closed). The keeper must never
///   call it twice for a task.
/// Devnet rules where the deployed contract has more: no auctions, pitches, ratings,
/// stakes or reputation; no proxy.
contract MonolithicTaskMarket {
    using TokenTransfer for address;

    bytes4 private constant CLAIM = bytes4(keccak256("TMP.mode.claim"));

    enum TaskStatus {
        Open,
        Claimed,
        WorkerSelected,
        PendingApproval,
        Accepted,
        Expired,
        Cancelled
    }

    struct Task {
        address requester;
        address worker;
        uint256 reward;
        uint256 expiryTime;
        TaskStatus status;
        bytes4 mode;
        uint16 feeBps;
        bytes32 deliverable;
    }

    address public owner;
    address public usdcToken;
    address public feeRecipient;
    uint16 public defaultFeeBps;
    mapping(address => bool) public trustedForwarders;
    mapping(address => uint256) public requesterNonce;
    mapping(bytes32 => Task) private _tasks;

    event TaskCreated(
        bytes32 indexed taskId, address indexed requester, uint256 reward, uint256 expiryTime, bytes4 mode
    );
    event TaskClaimed(bytes32 indexed taskId, address indexed claimer, uint256 stakeAmount);
    event TaskSubmitted(bytes32 indexed taskId, address indexed worker, bytes32 deliverable);
    event TaskAccepted(
        bytes32 indexed taskId,
        address indexed requester,
        address indexed worker,
        uint256 workerPayment,
        uint256 platformFee
    );
    event TaskExpired(bytes32 indexed taskId, address indexed requester, uint256 refundAmount);
    event TaskCancelled(bytes32 indexed taskId, address indexed requester, uint256 refundAmount);
    event ForwarderUpdated(address indexed forwarder, bool trusted);

    constructor(address token, address recipient, uint16 feeBps) {
        require(recipient != address(0), "Invalid fee recipient");
        require(feeBps <= 10000, "Fee BPS too high");
        owner = msg.sender;
        usdcToken = token;
        feeRecipient = recipient;
        defaultFeeBps = feeBps;
    }

    modifier onlyTrustedForwarder() {
        require(trustedForwarders[msg.sender], "Not trusted forwarder");
        _;
    }

    function isTrustedForwarder(address addr) external view returns (bool) {
        return trustedForwarders[addr];
    }

    function addForwarder(address forwarder) external {
        require(msg.sender == owner, "Not owner");
        require(forwarder != address(0), "Invalid forwarder address");
        trustedForwarders[forwarder] = true;
        emit ForwarderUpdated(forwarder, true);
    }

    function _actor() private view returns (address) {
        return IPgtrSender(msg.sender).pgtrSender();
    }

    function createTask(
        uint256 reward,
        uint256 duration,
        bytes4 mode,
        uint256, /* pitchDeadline */
        uint256, /* bidDeadline */
        bytes32, /* contentHash */
        string calldata, /* contentURI */
        bytes4 /* auctionSubtype */
    ) external onlyTrustedForwarder returns (bytes32 taskId) {
        address requester = _actor();
        require(requester != address(0), "Invalid requester");
        require(reward > 0, "Reward must be greater than 0");
        require(duration > 0, "Duration must be greater than 0");
        require(mode == CLAIM, "Invalid mode");
        taskId = keccak256(abi.encode(block.chainid, address(this), requester, requesterNonce[requester]++));
        _tasks[taskId] = Task({
            requester: requester,
            worker: address(0),
            reward: reward,
            expiryTime: block.timestamp + duration,
            status: TaskStatus.Open,
            mode: mode,
            feeBps: defaultFeeBps,
            deliverable: bytes32(0)
        });
        emit TaskCreated(taskId, requester, reward, block.timestamp + duration, mode);
    }

    function claimTask(bytes32 taskId, uint256 stakeAmount) external onlyTrustedForwarder {
        address worker = _actor();
        Task storage task = _tasks[taskId];
        require(task.requester != address(0), "Task does not exist");
        require(task.status == TaskStatus.Open, "Task not available");
        require(block.timestamp <= task.expiryTime, "Task expired");
        require(stakeAmount == 0, "Stakes are not taken here");
        task.worker = worker;
        task.status = TaskStatus.Claimed;
        emit TaskClaimed(taskId, worker, 0);
    }

    function submitWork(bytes32 taskId, bytes32 deliverable) external onlyTrustedForwarder {
        address worker = _actor();
        Task storage task = _tasks[taskId];
        require(task.requester != address(0), "Task does not exist");
        require(block.timestamp <= task.expiryTime, "Task expired");
        require(task.deliverable == bytes32(0), "Deliverable already set");
        require(task.status == TaskStatus.Claimed, "Task not claimed");
        require(worker == task.worker, "Worker must be claimer");
        task.deliverable = deliverable;
        emit TaskSubmitted(taskId, worker, deliverable);
    }

    function acceptSubmission(bytes32 taskId, address worker) external onlyTrustedForwarder {
        Task storage task = _tasks[taskId];
        require(_actor() == task.requester, "Not requester");
        require(block.timestamp <= task.expiryTime, "Task expired");
        require(task.status == TaskStatus.Claimed, "Task not claimed");
        require(worker == task.worker, "Worker must be claimer");
        task.status = TaskStatus.Accepted;
        uint256 fee = (task.reward * task.feeBps) / 10000;
        usdcToken.pay(worker, task.reward - fee);
        usdcToken.pay(feeRecipient, fee);
        emit TaskAccepted(taskId, task.requester, worker, task.reward - fee, fee);
    }

    function cancelTask(bytes32 taskId) external onlyTrustedForwarder {
        Task storage task = _tasks[taskId];
        require(task.requester != address(0), "Task does not exist");
        require(_actor() == task.requester, "Not requester");
        require(task.status == TaskStatus.Open, "Task not open");
        task.status = TaskStatus.Cancelled;
        usdcToken.pay(task.requester, task.reward);
        emit TaskCancelled(taskId, task.requester, task.reward);
    }

    function refundExpired(bytes32 taskId) external {
        Task storage task = _tasks[taskId];
        require(task.requester != address(0), "Task does not exist");
        require(block.timestamp > task.expiryTime, "Task not expired");
        require(task.status != TaskStatus.Accepted, "Task already accepted");
        require(task.status != TaskStatus.Cancelled, "Task cancelled");
        task.status = TaskStatus.Expired;
        usdcToken.pay(task.requester, task.reward);
        emit TaskExpired(taskId, task.requester, task.reward);
    }

    /// Status and expiry of a task (devnet only: the deployed contract's `tasks` getter
    /// returns the whole struct).
    function taskState(bytes32 taskId) external view returns (TaskStatus, uint256) {
        Task storage task = _tasks[taskId];
        return (task.status, task.expiryTime);
    }
}
