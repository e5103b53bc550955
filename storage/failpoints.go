//go:build failpoint

package storage

import "github.com/vdl-project/vdl/failpoints"

// The storage engine's failpoints (docs/failpoints.md). return(true) crashes
// the process (SIGKILL: what was written stays in the page cache, what was
// not synced is not acknowledged); return("powerloss") cuts the power
// (what was not synced is lost: the failpoint build's vfs.Lazy);
// return("eio") fails the call with an
// injected EIO, which makes the log unusable, as a real IO failure does (the
// Raft host then stops and the server answers /health 503).
func init() {
	failpoints.Register(
		failpoints.Def{
			Name:   "storage/beforeWrite",
			Place:  "storage/write.go (*Log).writeChunk: before the WriteAt of a chunk of records",
			Effect: `return(true): crash before the write; return("eio"): the write fails (log unusable); sleep(ms): delay it`,
		},
		failpoints.Def{
			Name:   "storage/tornWrite",
			Place:  "storage/write.go (*Log).writeChunk: instead of the WriteAt of a chunk",
			Effect: "return(true): write the first half of the chunk, then crash; return(n): its first n bytes, then crash (Open must cut the torn tail)",
		},
		failpoints.Def{
			Name:   "storage/afterWrite",
			Place:  "storage/write.go (*Log).writeChunk: after the WriteAt, before the records are published",
			Effect: "return(true): crash with the chunk written but not synced; sleep(ms): delay",
		},
		failpoints.Def{
			Name:   "storage/beforeSync",
			Place:  "storage/log.go (*Log).Sync: before the fsync of the active segment",
			Effect: `return(true): crash before fsync; return("eio"): the fsync fails (log unusable, host stops, no ack); sleep(ms): delay the fsync`,
		},
		failpoints.Def{
			Name:   "storage/afterSync",
			Place:  "storage/log.go (*Log).Sync: after the fsync (and directory sync), before Sync returns",
			Effect: "return(true): crash with the data durable but not yet acknowledged; sleep(ms): delay",
		},
		failpoints.Def{
			Name:   "storage/segmentRoll",
			Place:  "storage/write.go (*Log).roll: before the full segment is synced and the next one created",
			Effect: `return(true): crash at the roll; return("eio"): the roll fails (log unusable); sleep(ms): delay`,
		},
		failpoints.Def{
			Name:   "storage/indexFlush",
			Place:  "storage/segment.go (*segment).writeIndexFiles: after the .ridx file, before the .lidx file of a closing segment",
			Effect: `return(true): crash with the index half written (Open rebuilds it); return("eio"): the flush fails (log unusable)`,
		},
		failpoints.Def{
			Name:   "storage/beforeRecovery",
			Place:  "storage/recover.go (*Log).recover: at the start of Open's recovery",
			Effect: `return(true) or return("eio"): Open fails with EIO (the server does not start); set it with GO_FAILPOINTS`,
		},
	)
}
