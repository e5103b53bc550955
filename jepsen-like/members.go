package campaign

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The replace fault: a follower loses its disk and is replaced through
// membership changes, as docs/operations.md says an operator does
// ("Replacing a server"): it is killed, its data dir wiped, and it starts
// again on the empty dir (initial_cluster_state = "existing"); every stream
// removes it and adds it back as a learner (Raft ConfChangeV2 through any
// server's admin API, which redirects to the leader); at the next turn each
// stream promotes it to a voter once it caught up (copying the data from
// its peers). Meanwhile the stream runs on two voters. A promotion that
// does not succeed within 30 s is a finding.

// offsetsStream is the consumer offsets' stream every server hosts.
const offsetsStream = "__consumer_offsets"

func (r *runner) memberStreams() []string {
	return append(append([]string(nil), r.streams...), offsetsStream)
}

// replace wipes a follower and makes it a learner of every stream again.
func (r *runner) replace(victim uint64) error {
	if leader := r.c.WaitLeader(r.streams[0], 10*time.Second); leader == victim {
		for _, n := range r.c.Nodes {
			if n.ID != leader {
				victim = n.ID
				break
			}
		}
	}
	r.c.Kill(victim)
	r.c.Wipe(victim, "existing")
	r.openFault(replaceKey(victim), "replace", fmt.Sprintf("n%d", victim))
	r.c.Restart(victim)
	// Removed from every stream first: the leaders forget its old data
	// dir only then, and refuse to add it back before.
	for _, s := range r.memberStreams() {
		if err := r.memberChange(http.MethodDelete, s, victim, "", 15*time.Second); err != nil {
			return err
		}
	}
	// From here the next turn finishes the replacement, whatever happens.
	r.active = append(r.active, activeFault{"replace", victim})
	return r.addLearner(victim, 20*time.Second)
}

// addLearner adds the node back to every stream as a learner (again: one
// it is already a member of is done).
func (r *runner) addLearner(id uint64, timeout time.Duration) error {
	for _, s := range r.memberStreams() {
		if err := r.memberChange(http.MethodPost, s, id, "", timeout); err != nil {
			return err
		}
	}
	return nil
}

// promote makes the replaced server a voter of every stream again.
func (r *runner) promote(id uint64) error {
	defer r.closeFaults(replaceKey(id))
	// An add the last turn could not finish (a leader still applying the
	// removal elsewhere) is tried again first.
	if err := r.addLearner(id, 20*time.Second); err != nil {
		return fmt.Errorf("the replaced n%d could not be added back: %w", id, err)
	}
	for _, s := range r.memberStreams() {
		if err := r.memberChange(http.MethodPost, s, id, "/promote", 30*time.Second); err != nil {
			return fmt.Errorf("the replaced n%d did not become a voter again: %w", id, err)
		}
	}
	return nil
}

func replaceKey(id uint64) string { return fmt.Sprintf("replace:%d", id) }

// memberChange sends a membership change of stream about node id to the
// admin API of a running server other than id (redirected to the
// leader), again until it is accepted or timeout.
func (r *runner) memberChange(method, stream string, id uint64, suffix string, timeout time.Duration) error {
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, n := range r.c.Nodes {
			if n.ID == id || !n.Running() {
				continue
			}
			req, err := http.NewRequest(method, fmt.Sprintf("%s/streams/%s/members/%d%s", n.AdminBase, stream, id, suffix), nil)
			if err != nil {
				return err
			}
			resp, err := n.AdminClient.Do(req)
			if err != nil {
				last = err.Error()
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
			// What is done already: a removal of a node no longer a
			// member, an add of a member, a promotion of a voter.
			if (method == http.MethodDelete && strings.Contains(last, "not a member")) ||
				(suffix == "" && method == http.MethodPost && strings.Contains(last, " is already a ")) ||
				(suffix == "/promote" && strings.Contains(last, "is already a voter")) {
				return nil
			}
			break
		}
	}
	return fmt.Errorf("%s %s members/%d%s: %s", method, stream, id, suffix, last)
}
