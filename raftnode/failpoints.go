//go:build failpoint

package raftnode

import "github.com/vdl-project/vdl/failpoints"

// The Raft driver's failpoints (docs/failpoints.md). They are in the Node
// and its jobs (and the Host's Step), never in the Core. Message drops
// apply to every group; return(true) on a crash marker is SIGKILL,
// return("powerloss") a power cut (failpoints.CrashOn).
func init() {
	failpoints.Register(
		failpoints.Def{
			Name:   "raftnode/beforeSave",
			Place:  "raftnode/pipeline.go (*WriteJob).run (the writer): before an Append's Write to the log",
			Effect: "return(true): crash before the entries and hard state are written; sleep(ms): delay the save (and every append behind it)",
		},
		failpoints.Def{
			Name:   "raftnode/afterSave",
			Place:  "raftnode/pipeline.go afterSave (SyncJob.Run, the syncer): after the Sync of a batch of appends, before raft hears they are durable",
			Effect: "return(true): crash with the entries durable but not acknowledged; sleep(ms): delay the acknowledgement",
		},
		failpoints.Def{
			Name:   "raftnode/beforeLeaderSend",
			Place:  "raftnode/node.go (*Node).send: before sending a leader's message (MsgApp, MsgHeartbeat, MsgSnap, MsgTimeoutNow)",
			Effect: "return(id): drop them to peer id; return(true): drop them all; sleep(ms): delay each (stalls the core)",
		},
		failpoints.Def{
			Name:   "raftnode/beforeFollowerSend",
			Place:  "raftnode/node.go (*Node).send: before sending a follower's answer (MsgAppResp, MsgHeartbeatResp)",
			Effect: "return(id): drop them to peer id; return(true): drop them all; sleep(ms): delay each (stalls the core)",
		},
		failpoints.Def{
			Name:   "raftnode/dropTo",
			Place:  "raftnode/node.go (*Node).send: before every Raft message sent",
			Effect: "return(id): drop every message to peer id; return(\"2,3\"): to any of them (one side of a partition)",
		},
		failpoints.Def{
			Name:   "raftnode/dropFrom",
			Place:  "raftnode/host.go (*Host).Step: every Raft message received from the transport",
			Effect: "return(id) or return(\"2,3\"): drop every message from those peers (the other side of a partition); sleep(ms): delay incoming messages",
		},
		failpoints.Def{
			Name:   "raftnode/beforeTick",
			Place:  "raftnode/node.go (*Node).Tick: before every tick of the server's groups",
			Effect: "sleep(ms): each tick comes that much later, as from a clock running slow (raft's timeouts, CheckQuorum included, stretch; the loop stalls meanwhile)",
		},
		failpoints.Def{
			Name:   "raftnode/beforeApply",
			Place:  "raftnode/node.go (*Node).applied: before an Applied effect (applied index recorded, high watermark published)",
			Effect: "return(true): crash before the applied entries are published; sleep(ms): delay it (stalls the core: produce latency)",
		},
		failpoints.Def{
			Name:   "raftnode/afterApply",
			Place:  "raftnode/node.go (*Node).applied: after an Applied effect",
			Effect: "return(true): crash after the high watermark moved; sleep(ms): delay (stalls the core)",
		},
		failpoints.Def{
			Name:   "raftnode/beforeSnapshotSend",
			Place:  "raftnode/node.go (*Node).send: before sending a MsgSnap",
			Effect: "return(true) or return(id): drop the snapshot (to id) and report it failed (raft retries later); sleep(ms): delay it",
		},
		failpoints.Def{
			Name:   "raftnode/beforeSnapshotInstall",
			Place:  "raftnode/install.go (*InstallJob).Run: before InstallSnapshot of a received snapshot (each attempt)",
			Effect: `return(true): crash before the install; return("eio"): the install fails (the server fail-stops); sleep(ms): delay it`,
		},
	)
}
