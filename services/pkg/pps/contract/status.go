package contract

// What the broker reports about each pipeline, and the operator reads into the
// SecurePipeline's status (docs/pps.md "SecurePipeline"): Prometheus metrics on the broker's
// metrics port (:9090 /metrics), each labelled with LabelPipeline = Pipeline.Name. They hold
// no label, seed, mask or output (spec §5.4): counts, sizes, rounds and times only.
//
// Every broker replica reports the executions it ran itself; the operator adds the counters
// of every replica and takes the last execution as the one with the latest timestamp.
const (
	// LabelPipeline names the pipeline ("namespace/name") of every metric below.
	LabelPipeline = "pipeline"
	// LabelStatus is an execution's Output status (StatusOK, StatusInsufficient) or
	// StatusFailed when no output was published.
	LabelStatus = "status"
	// LabelFn and LabelCircuitHash are MetricFunction's.
	LabelFn          = "fn"
	LabelCircuitHash = "circuit_hash"

	// MetricFunction is 1 for the pipeline's compiled function: labels fn (the fnid, a hash of
	// the owner's canonical source, published in status.fnID and in the subscribers' NATS
	// permissions) and circuit_hash (hex SHA-256 of the canonical gate list, spec D10).
	MetricFunction = "pps_broker_function_info"
	// MetricANDGates and MetricCircuitBytes size the pipeline's circuit: AND gates, and the
	// bytes of one garbled circuit as streamed (header, identity tables, gate tables, d).
	MetricANDGates     = "pps_broker_circuit_and_gates"
	MetricCircuitBytes = "pps_broker_circuit_bytes"
	// MetricExecutions counts finished executions by status (a counter).
	MetricExecutions = "pps_broker_executions_total"
	// The last execution this replica finished: Unix time it finished, its function round ρ,
	// its valid inputs, its latency (window end to published output, in seconds), and its
	// status as MetricLastStatus{status=…} = 1.
	MetricLastTime    = "pps_broker_last_execution_timestamp_seconds"
	MetricLastRound   = "pps_broker_last_execution_round"
	MetricLastValid   = "pps_broker_last_execution_valid_inputs"
	MetricLastLatency = "pps_broker_last_execution_latency_seconds"
	MetricLastStatus  = "pps_broker_last_execution_status"

	// StatusFailed is an execution that published no output (garbler unreachable, stream
	// broken): only in metrics, never on the output topic.
	StatusFailed = "failed"
)
