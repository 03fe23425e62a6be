// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// The monolithic task market (before the diamond) declared ReputationRegistryUpdated with its
/// parameter unindexed; the diamond's, ITMPReputation's, is indexed. One signature, so one
/// topic0, which a contract cannot declare twice: the older layout is declared here and
/// EventEmitter emits it qualified by this interface's name.
interface IOlderTaskMarketEvents {
    event ReputationRegistryUpdated(address registry);
}

/// Emits, with caller-chosen arguments, every escrow event the indexer must understand
/// (current, legacy and older shapes) and a few it must not, so indexer tests and benchmarks
/// can produce exact logs in bulk without running the escrow state machines.
/// Overloaded events (same name, different types) are distinct topic0s by construction; one
/// signature with two indexings (ReputationRegistryUpdated) is one topic0, told apart by the
/// number of topics.
contract EventEmitter {
    // ----- ERC-8183, current -----
    event JobCreated(
        uint256 indexed jobId,
        address indexed client,
        address indexed provider,
        address evaluator,
        uint256 expiredAt,
        address hook
    );
    event ProviderSet(uint256 indexed jobId, address indexed provider, uint256 agentId);
    event BudgetSet(uint256 indexed jobId, address indexed token, uint256 amount);
    event PlatformFeeSet(uint256 feeBP, address indexed treasury);
    event EvaluatorFeeSet(uint256 feeBP);
    // ----- ERC-8183, legacy ACP -----
    event JobCreated(
        uint256 indexed jobId,
        address indexed client,
        address indexed provider,
        address evaluator,
        uint256 expiredAt
    );
    event ProviderSet(uint256 indexed jobId, address indexed provider);
    event BudgetSet(uint256 indexed jobId, uint256 amount);
    // ----- ERC-8183, both -----
    event JobFunded(uint256 indexed jobId, address indexed client, uint256 amount);
    event JobSubmitted(uint256 indexed jobId, address indexed provider, bytes32 deliverable);
    event JobCompleted(uint256 indexed jobId, address indexed evaluator, bytes32 reason);
    event JobRejected(uint256 indexed jobId, address indexed rejector, bytes32 reason);
    event JobExpired(uint256 indexed jobId);
    event PaymentReleased(uint256 indexed jobId, address indexed provider, uint256 amount);
    event PlatformFeePaid(uint256 indexed jobId, address indexed treasury, uint256 amount);
    event EvaluatorFeePaid(uint256 indexed jobId, address indexed evaluator, uint256 amount);
    event Refunded(uint256 indexed jobId, address indexed client, uint256 amount);

    // ----- task market, revision 14 and later -----
    event TaskCreated(
        bytes32 indexed taskId,
        address indexed requester,
        uint256 reward,
        bytes4 indexed mode,
        uint256 expiryTime,
        bool stakeRequired,
        uint16 stakeBps
    );
    event TaskUpdated(bytes32 indexed taskId, uint256 newReward, uint256 newExpiryTime);
    event SubmissionRejected(bytes32 indexed taskId, address indexed worker);
    event StakeForfeited(bytes32 indexed taskId, address indexed worker, uint256 stakeAmount);
    event StakeReturned(bytes32 indexed taskId, address indexed worker, uint256 stakeAmount);
    event TaskRated(bytes32 indexed taskId, address indexed worker, uint8 rating, uint256 raterAgentId);
    event RequesterReputation(bytes32 indexed taskId, address indexed requester, bytes32 event_, uint256 reward, uint32 submissionCount, bool selfAward);
    event SelfAward(bytes32 indexed taskId, address indexed requester, address indexed worker);
    event BidSubmitted(bytes32 indexed taskId, address indexed worker, uint256 price);
    event AuctionAccepted(bytes32 indexed taskId, address indexed worker, uint256 acceptedPrice);
    event PitchSubmitted(bytes32 indexed taskId, address indexed worker, bytes32 pitchHash);
    event ProofSubmitted(bytes32 indexed taskId, address indexed worker, bytes32 proofHash, bytes32 proofType, uint256 metricValue);
    event HookRegistered(bytes32 indexed taskId, address hookContract);
    event HookCallFailed(address indexed hook);
    event ForwarderUpdated(address indexed forwarder, bool trusted);
    event Paused(address account);
    event Unpaused(address account);
    event FeesUpdated(uint16 feeBps);
    event FeeRecipientUpdated(address recipient);
    event ReputationRegistryUpdated(address indexed registry);
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);
    event ReputationFeedbackFailed(bytes32 indexed taskId, uint256 indexed agentId);
    event Upgraded(address indexed implementation);
    event Initialized(uint64 version);
    event OwnershipTransferStarted(address indexed previousOwner, address indexed newOwner);
    event MinAppealWindowUpdated(uint32 minAppealWindowSecs);
    // recognised by topic0 only (dynamic parameters)
    event DefaultHooksSet(address[] hooks);
    // ----- task market, before revision 14 -----
    event TaskCreated(
        bytes32 indexed taskId,
        address indexed requester,
        uint256 reward,
        bytes4 indexed mode,
        uint256 expiryTime
    );
    // ----- task market, older -----
    event TaskCreated(
        bytes32 indexed taskId,
        address indexed requester,
        uint256 reward,
        uint256 expiryTime,
        bytes4 mode
    );
    event TaskAccepted(
        bytes32 indexed taskId,
        address indexed requester,
        address indexed worker,
        uint256 workerPayment,
        uint256 platformFee
    );
    event TaskRated(bytes32 indexed taskId, address indexed worker, uint8 rating);
    // ----- task market, both -----
    event TaskClaimed(bytes32 indexed taskId, address indexed worker, uint256 stakeAmount);
    event TaskWorkerSelected(bytes32 indexed taskId, address indexed worker);
    event TaskSubmitted(bytes32 indexed taskId, address indexed worker, bytes32 deliverable);
    event EvaluatorAssigned(bytes32 indexed taskId, address indexed evaluator, uint256 stakeAmount);
    event TaskEvaluated(
        bytes32 indexed taskId, address indexed evaluator, uint8 verdictType, uint16 score
    );
    event TaskAppealed(bytes32 indexed taskId, address indexed appellant);
    event TaskDisputed(bytes32 indexed taskId, address indexed disputeResolver);
    event EvaluatorTimedOut(
        bytes32 indexed taskId, address indexed evaluator, uint256 forfeitedStake
    );
    event TaskCompleted(
        bytes32 indexed taskId,
        address indexed requester,
        address indexed worker,
        uint256 workerPayment,
        uint256 platformFee
    );
    event TaskExpired(bytes32 indexed taskId, address indexed requester, uint256 refundAmount);
    event TaskCancelled(bytes32 indexed taskId, address indexed requester, uint256 refundAmount);
    event TaskReopened(bytes32 indexed taskId);

    // ----- noise -----
    event Mystery(uint256 indexed a, bytes b);

    // ===== ERC-8183 single events =====

    function emitJobCreated(
        uint256 jobId,
        address client,
        address provider,
        address evaluator,
        uint256 expiredAt,
        address hook
    ) external {
        emit JobCreated(jobId, client, provider, evaluator, expiredAt, hook);
    }

    function emitLegacyJobCreated(
        uint256 jobId,
        address client,
        address provider,
        address evaluator,
        uint256 expiredAt
    ) external {
        emit JobCreated(jobId, client, provider, evaluator, expiredAt);
    }

    function emitProviderSet(uint256 jobId, address provider, uint256 agentId) external {
        emit ProviderSet(jobId, provider, agentId);
    }

    function emitLegacyProviderSet(uint256 jobId, address provider) external {
        emit ProviderSet(jobId, provider);
    }

    function emitBudgetSet(uint256 jobId, address token, uint256 amount) external {
        emit BudgetSet(jobId, token, amount);
    }

    function emitLegacyBudgetSet(uint256 jobId, uint256 amount) external {
        emit BudgetSet(jobId, amount);
    }

    function emitPlatformFeeSet(uint256 feeBP, address treasury) external {
        emit PlatformFeeSet(feeBP, treasury);
    }

    function emitEvaluatorFeeSet(uint256 feeBP) external {
        emit EvaluatorFeeSet(feeBP);
    }

    function emitJobFunded(uint256 jobId, address client, uint256 amount) external {
        emit JobFunded(jobId, client, amount);
    }

    function emitJobSubmitted(uint256 jobId, address provider, bytes32 deliverable) external {
        emit JobSubmitted(jobId, provider, deliverable);
    }

    function emitJobCompleted(uint256 jobId, address evaluator, bytes32 reason) external {
        emit JobCompleted(jobId, evaluator, reason);
    }

    function emitJobRejected(uint256 jobId, address rejector, bytes32 reason) external {
        emit JobRejected(jobId, rejector, reason);
    }

    function emitJobExpired(uint256 jobId) external {
        emit JobExpired(jobId);
    }

    function emitPaymentReleased(uint256 jobId, address provider, uint256 amount) external {
        emit PaymentReleased(jobId, provider, amount);
    }

    function emitPlatformFeePaid(uint256 jobId, address treasury, uint256 amount) external {
        emit PlatformFeePaid(jobId, treasury, amount);
    }

    function emitEvaluatorFeePaid(uint256 jobId, address evaluator, uint256 amount) external {
        emit EvaluatorFeePaid(jobId, evaluator, amount);
    }

    function emitRefunded(uint256 jobId, address client, uint256 amount) external {
        emit Refunded(jobId, client, amount);
    }

    // ===== task market single events =====

    function emitTaskCreated(
        bytes32 taskId,
        address requester,
        uint256 reward,
        bytes4 mode,
        uint256 expiryTime,
        bool stakeRequired,
        uint16 stakeBps
    ) external {
        emit TaskCreated(taskId, requester, reward, mode, expiryTime, stakeRequired, stakeBps);
    }

    function emitPre14TaskCreated(
        bytes32 taskId,
        address requester,
        uint256 reward,
        bytes4 mode,
        uint256 expiryTime
    ) external {
        emit TaskCreated(taskId, requester, reward, mode, expiryTime);
    }

    function emitTaskUpdated(bytes32 taskId, uint256 newReward, uint256 newExpiryTime) external {
        emit TaskUpdated(taskId, newReward, newExpiryTime);
    }

    function emitSubmissionRejected(bytes32 taskId, address worker) external {
        emit SubmissionRejected(taskId, worker);
    }

    function emitStakeForfeited(bytes32 taskId, address worker, uint256 stakeAmount) external {
        emit StakeForfeited(taskId, worker, stakeAmount);
    }

    function emitStakeReturned(bytes32 taskId, address worker, uint256 stakeAmount) external {
        emit StakeReturned(taskId, worker, stakeAmount);
    }

    function emitTaskRated(bytes32 taskId, address worker, uint8 rating, uint256 raterAgentId) external {
        emit TaskRated(taskId, worker, rating, raterAgentId);
    }

    function emitRequesterReputation(bytes32 taskId, address requester, bytes32 event_, uint256 reward, uint32 submissionCount, bool selfAward) external {
        emit RequesterReputation(taskId, requester, event_, reward, submissionCount, selfAward);
    }

    function emitSelfAward(bytes32 taskId, address requester, address worker) external {
        emit SelfAward(taskId, requester, worker);
    }

    function emitBidSubmitted(bytes32 taskId, address worker, uint256 price) external {
        emit BidSubmitted(taskId, worker, price);
    }

    function emitAuctionAccepted(bytes32 taskId, address worker, uint256 acceptedPrice) external {
        emit AuctionAccepted(taskId, worker, acceptedPrice);
    }

    function emitPitchSubmitted(bytes32 taskId, address worker, bytes32 pitchHash) external {
        emit PitchSubmitted(taskId, worker, pitchHash);
    }

    function emitProofSubmitted(bytes32 taskId, address worker, bytes32 proofHash, bytes32 proofType, uint256 metricValue) external {
        emit ProofSubmitted(taskId, worker, proofHash, proofType, metricValue);
    }

    function emitHookRegistered(bytes32 taskId, address hookContract) external {
        emit HookRegistered(taskId, hookContract);
    }

    function emitHookCallFailed(address hook) external {
        emit HookCallFailed(hook);
    }

    function emitForwarderUpdated(address forwarder, bool trusted) external {
        emit ForwarderUpdated(forwarder, trusted);
    }

    function emitPaused(address account) external {
        emit Paused(account);
    }

    function emitUnpaused(address account) external {
        emit Unpaused(account);
    }

    function emitFeesUpdated(uint16 feeBps) external {
        emit FeesUpdated(feeBps);
    }

    function emitFeeRecipientUpdated(address recipient) external {
        emit FeeRecipientUpdated(recipient);
    }

    function emitReputationRegistryUpdated(address registry) external {
        emit ReputationRegistryUpdated(registry);
    }

    function emitOlderReputationRegistryUpdated(address registry) external {
        emit IOlderTaskMarketEvents.ReputationRegistryUpdated(registry);
    }

    function emitOwnershipTransferred(address previousOwner, address newOwner) external {
        emit OwnershipTransferred(previousOwner, newOwner);
    }

    function emitDefaultHooksSet(address[] calldata hooks) external {
        emit DefaultHooksSet(hooks);
    }

    function emitReputationFeedbackFailed(bytes32 taskId, uint256 agentId) external {
        emit ReputationFeedbackFailed(taskId, agentId);
    }

    function emitUpgraded(address implementation) external {
        emit Upgraded(implementation);
    }

    function emitInitialized(uint64 version) external {
        emit Initialized(version);
    }

    function emitOwnershipTransferStarted(address previousOwner, address newOwner) external {
        emit OwnershipTransferStarted(previousOwner, newOwner);
    }

    function emitMinAppealWindowUpdated(uint32 minAppealWindowSecs) external {
        emit MinAppealWindowUpdated(minAppealWindowSecs);
    }

    function emitOlderTaskCreated(
        bytes32 taskId,
        address requester,
        uint256 reward,
        uint256 expiryTime,
        bytes4 mode
    ) external {
        emit TaskCreated(taskId, requester, reward, expiryTime, mode);
    }

    function emitTaskAccepted(
        bytes32 taskId,
        address requester,
        address worker,
        uint256 workerPayment,
        uint256 platformFee
    ) external {
        emit TaskAccepted(taskId, requester, worker, workerPayment, platformFee);
    }

    function emitOlderTaskRated(bytes32 taskId, address worker, uint8 rating) external {
        emit TaskRated(taskId, worker, rating);
    }

    function emitTaskClaimed(bytes32 taskId, address worker, uint256 stakeAmount) external {
        emit TaskClaimed(taskId, worker, stakeAmount);
    }

    function emitTaskWorkerSelected(bytes32 taskId, address worker) external {
        emit TaskWorkerSelected(taskId, worker);
    }

    function emitTaskSubmitted(bytes32 taskId, address worker, bytes32 deliverable) external {
        emit TaskSubmitted(taskId, worker, deliverable);
    }

    function emitEvaluatorAssigned(bytes32 taskId, address evaluator, uint256 stakeAmount)
        external
    {
        emit EvaluatorAssigned(taskId, evaluator, stakeAmount);
    }

    function emitTaskEvaluated(bytes32 taskId, address evaluator, uint8 verdictType, uint16 score)
        external
    {
        emit TaskEvaluated(taskId, evaluator, verdictType, score);
    }

    function emitTaskAppealed(bytes32 taskId, address appellant) external {
        emit TaskAppealed(taskId, appellant);
    }

    function emitTaskDisputed(bytes32 taskId, address disputeResolver) external {
        emit TaskDisputed(taskId, disputeResolver);
    }

    function emitEvaluatorTimedOut(bytes32 taskId, address evaluator, uint256 forfeitedStake)
        external
    {
        emit EvaluatorTimedOut(taskId, evaluator, forfeitedStake);
    }

    function emitTaskCompleted(
        bytes32 taskId,
        address requester,
        address worker,
        uint256 workerPayment,
        uint256 platformFee
    ) external {
        emit TaskCompleted(taskId, requester, worker, workerPayment, platformFee);
    }

    function emitTaskExpired(bytes32 taskId, address requester, uint256 refundAmount) external {
        emit TaskExpired(taskId, requester, refundAmount);
    }

    function emitTaskCancelled(bytes32 taskId, address requester, uint256 refundAmount)
        external
    {
        emit TaskCancelled(taskId, requester, refundAmount);
    }

    function emitTaskReopened(bytes32 taskId) external {
        emit TaskReopened(taskId);
    }

    // ===== noise and raw logs =====

    function emitMystery(uint256 a, bytes calldata b) external {
        emit Mystery(a, b);
    }

    /// Any log shape at all (0-4 topics), e.g. a later TaskCreated variant with extra fields.
    function emitRaw(bytes32[] calldata topics, bytes calldata data) external {
        uint256 n = topics.length;
        require(n <= 4, "too many topics");
        bytes memory d = data;
        bytes32 t0 = n > 0 ? topics[0] : bytes32(0);
        bytes32 t1 = n > 1 ? topics[1] : bytes32(0);
        bytes32 t2 = n > 2 ? topics[2] : bytes32(0);
        bytes32 t3 = n > 3 ? topics[3] : bytes32(0);
        assembly ("memory-safe") {
            let p := add(d, 32)
            let len := mload(d)
            switch n
            case 0 { log0(p, len) }
            case 1 { log1(p, len, t0) }
            case 2 { log2(p, len, t0, t1) }
            case 3 { log3(p, len, t0, t1, t2) }
            default { log4(p, len, t0, t1, t2, t3) }
        }
    }

    // ===== bulk =====

    /// Job ids firstId..firstId+count-1, each: JobCreated (current), BudgetSet, JobFunded and,
    /// when `stages` >= 2, JobSubmitted (deliverable = keccak256(abi.encode(jobId))), and when
    /// `stages` >= 3, JobCompleted (reason = keccak256(abi.encode(jobId, 1))) + PaymentReleased.
    function emitJobFlowBatch(
        uint256 firstId,
        uint256 count,
        address client,
        address provider,
        address evaluator,
        address token,
        uint256 amount,
        uint256 expiredAt,
        uint8 stages
    ) external {
        for (uint256 id = firstId; id < firstId + count; ++id) {
            emit JobCreated(id, client, provider, evaluator, expiredAt, address(0));
            emit BudgetSet(id, token, amount);
            emit JobFunded(id, client, amount);
            if (stages >= 2) emit JobSubmitted(id, provider, keccak256(abi.encode(id)));
            if (stages >= 3) {
                emit JobCompleted(id, evaluator, keccak256(abi.encode(id, uint256(1))));
                emit PaymentReleased(id, provider, amount);
            }
        }
    }

    /// Legacy-shaped JobCreated + BudgetSet + JobFunded for ids firstId..firstId+count-1.
    function emitLegacyJobFlowBatch(
        uint256 firstId,
        uint256 count,
        address client,
        address provider,
        address evaluator,
        uint256 amount,
        uint256 expiredAt
    ) external {
        for (uint256 id = firstId; id < firstId + count; ++id) {
            emit JobCreated(id, client, provider, evaluator, expiredAt);
            emit BudgetSet(id, amount);
            emit JobFunded(id, client, amount);
        }
    }

    /// TaskCreated (pre-revision-14 shape) for taskId = keccak256(abi.encode(seed, i)), i < count.
    function emitTaskCreatedBatch(
        bytes32 seed,
        uint256 count,
        address requester,
        uint256 reward,
        bytes4 mode,
        uint256 expiryTime
    ) external {
        for (uint256 i = 0; i < count; ++i) {
            emit TaskCreated(keccak256(abi.encode(seed, i)), requester, reward, mode, expiryTime);
        }
    }

    /// `count` Mystery logs with a = first..first+count-1: noise an indexer must skip or keep raw.
    function emitMysteryBatch(uint256 first, uint256 count, bytes calldata b) external {
        for (uint256 a = first; a < first + count; ++a) {
            emit Mystery(a, b);
        }
    }
}
