// Package kafka is VDL's Kafka wire protocol front end: unmodified Kafka
// clients produce to and consume from VDL streams (one topic each, with
// partition 0 only).
//
// It owns:
//
//   - Session (session.go): the state machine of one client connection. It
//     does no IO, starts no goroutines and reads no clock, so it is tested
//     and simulated deterministically;
//   - Server (server.go): the IO around sessions — listening, reading
//     frames, writing responses, deadlines and resource bounds;
//   - profiles (profiles.go): the coherent sets of API versions advertised
//     ("modern", like Kafka 2.4; "kafka-0.10");
//   - one file per API, named by its key (00_produce.go, 01_fetch.go, ...,
//     60_describe_cluster.go): version notes, registration (versions per
//     profile, handler, request shape) and handler; apis.go lists them.
//
// What it needs from the rest of a server is the Backend interface
// (backend.go), which returns this package's errors (ErrNotLeader, ...):
// the translation of the lower layers' errors belongs to the Backend's
// implementation (server.Backend), so this package depends on neither
// raftnode nor storage (deps_test.go). Stored batches are of the leaf
// package batchfmt, which storage shares.
//
// A request flows so: the Server reads a frame and hands it to
// Session.Receive, which checks the header, the profile and the request's
// shape (the allocation guard), decodes it with kmsg and calls the API's
// handler. The handler answers at once or parks an operation: a produce
// waits for Backend.Produce, whose result comes back as a Completion
// (Session.ProduceDone); a fetch waits for data (Session.Poll). Responses
// leave strictly in request order (Session.Take).
package kafka
