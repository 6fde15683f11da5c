package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// Deployment says what the ZooKeeper servers of a Client are, which decides
// from which moment a lease counts: in an ensemble, from what the leader is
// known to have heard (the renewal before the last one: see
// docs/zookeeper.md, "Ensembles"); on a standalone server, from the last
// renewal. It is the Options.Deployment of New and the standalone parameter
// of a zk:// URL.
type Deployment int

const (
	// Detect, the default, finds out. ZooKeeper 3.5 and later keep the
	// membership of an ensemble in the node /zookeeper/config; a
	// standalone server leaves it empty. The Client reads it once when it
	// is made (New, Open: one request more), and then in place of each sync
	// that the ensemble rule sends to prove that the leader heard from the
	// session — a renewal's, and a grant's after a long wait — for as long
	// as the answer is empty: no request more than the ensemble rule's but
	// the first, and a finding never older than the proof it backs, on
	// whatever server the Client is by then. An empty answer proves that
	// the server that expires the session heard from it when the read was
	// sent, so a lease counts from its last renewal, as with Standalone.
	// Any other answer (the members; no such node, as on 3.4; an error that
	// is not a connection problem) puts the Client on the ensemble rule
	// for good. The proof is in standalone.go. A TickTime turns detection
	// off.
	Detect Deployment = iota

	// Standalone states that the server is a single ZooKeeper in
	// standalone mode, or otherwise the server that expires the session and
	// hears of every request at once, such as the only member of an
	// ensemble of one (standaloneEnabled=false) without observers. Every
	// answered request then counts from when it was sent, and the Client
	// reads no /zookeeper/config. Never state it for an ensemble: a lease
	// could outlive its session by up to half a tick. Excludes TickTime.
	Standalone

	// Ensemble states that the servers form an ensemble: the ensemble rule,
	// without detection (and without its read at the start).
	Ensemble
)

func (d Deployment) String() string {
	switch d {
	case Detect:
		return "Detect"
	case Standalone:
		return "Standalone"
	case Ensemble:
		return "Ensemble"
	}
	return fmt.Sprintf("Deployment(%d)", int(d))
}

// configNode is where ZooKeeper 3.5 and later keep the membership of an
// ensemble.
const configNode = "/zookeeper/config"

// checkStandalone sends the standalone check, a read of /zookeeper/config,
// while the Client makes it (see Detect). It returns when the read was sent,
// and proved true when the server answered it with no data on the session
// it was sent on: the server that expires the session heard from it at sent
// or later, which it has recorded (heard.leaderTouched). proved is false,
// with no request, once the Client has stopped checking, and after an
// answer that stops the checks, or one on another session; err is a
// connection problem (or the end of ctx), which tells nothing.
//
// Why an empty answer proves it. From ZooKeeper 3.8.0 (the Debian package
// the tests run: its classes, and the apache/zookeeper sources):
//
//   - Every DataTree has the node, created empty (DataTree.addConfigNode),
//     with the ACL world:anyone:r: only reconfig writes it, or a superuser
//     by hand. ZooKeeper 3.4 has no such node: ErrNoNode, and the ensemble
//     rule.
//   - A standalone server (ZooKeeperServerMain) never writes it.
//   - A server of an ensemble (QuorumPeerMain.runFromConfig) writes the
//     membership into it (ZKDatabase.initConfigInZKDatabase: the
//     QuorumVerifier's text, a "server.N=…" line for every participant and
//     observer and "version=…", never empty), then loads its snapshot
//     (QuorumPeer.start → loadDataBase), which replaces the node with the
//     snapshot's copy (DataTree.deserialize clears the tree). A follower or
//     an observer writes the membership again after every sync with the
//     leader, whatever its kind (DIFF, SNAP, TRUNC), before it serves a
//     client (Learner.syncWithLeader); with reconfigEnabled,
//     QuorumPeer.processReconfig does too. The leader does not.
//   - A server of an ensemble serves clients only while it leads, follows
//     or observes: when it stops, it closes every client connection
//     (Leader.shutdown, Learner.shutdown → closeAllConnections), and the
//     read-only server of readonlymode.enabled refuses clients that do not
//     ask for read-only mode, which go-zookeeper never does.
//   - So a follower or an observer always shows the membership, and the
//     only member that can show an empty node is a leader that loaded it
//     empty from its snapshot: one whose data came from a standalone server
//     (measured: a standalone server's data directory given to the member
//     with the highest id of a new 3-node ensemble, which then leads; it
//     shows an empty node while it leads, its followers the membership).
//   - Both servers that can answer empty expire sessions themselves (the
//     leader's session tracker is the ensemble's), and both touch the
//     session of every request of their own clients when it arrives
//     (ZooKeeperServer.submitRequestNow → touch; on the leader through
//     LeaderSessionTracker to the global SessionTrackerImpl), which sets its
//     expiry to that moment plus the timeout at least. The read arrived
//     after sent. (A follower, by contrast, only notes the touch for its
//     next ping reply: see heard.)
//   - A server that takes the sessions over later (the same one restarted,
//     an ensemble made from its data, a new leader) counts every session
//     from its own start (SessionTrackerImpl gives each a full timeout),
//     after anything the one before heard. The exception is shared with the
//     ensemble rule, whose syncs the leader answers: a leader cut off from
//     its quorum serves its clients until it notices (about syncLimit
//     ticks, as long as its followers take to give up on it), and a
//     leader elected meanwhile on the other side counts from its own start,
//     which may come a little before the old leader's last answers.
//
// And why the check must be repeated rather than made once: a session
// outlives its server's change of kind. Measured: a client's session on a
// standalone server survived the server's restart as a follower of a 3-node
// ensemble made from copies of its data, on the same address; the client
// reconnected with the same session and read the membership. A finding made
// at New would then count a follower's answers as a standalone server's,
// and New cannot see reconnects. Each proof therefore makes its own check:
// a renewal reads the node in place of its sync (the exists after it then
// reads a state at least as recent as the server's at the read, since a
// server refuses a client that has seen a later zxid than its own), and so
// does a grant that needs a fresh proof. Until the first empty answer, and
// between the checks, the Client counts everything else by the ensemble
// rule, which holds on any server.
//
// An ensemble of one (standaloneEnabled=false, one server) shows its one
// member, and gets the ensemble rule needlessly: Standalone is right there
// while it has no observers.
func (d *zkDriver) checkStandalone(ctx context.Context, timeout time.Duration) (sent time.Time, proved bool, err error) {
	if !d.checking.Load() {
		return time.Time{}, false, nil
	}
	sid := d.conn.SessionID()
	sent = time.Now()
	// getData /zookeeper/config: empty on a standalone server.
	data, err := call(ctx, nil, timeout, func() ([]byte, error) {
		data, _, err := d.conn.Get(configNode)
		return data, err
	})
	switch {
	case err == nil && len(data) == 0:
		if sid == 0 || sid != d.conn.SessionID() {
			return sent, false, nil // answered on another session: proves nothing
		}
		d.noteAlive(sid, sent)
		d.heard.leaderTouched(sid, sent)
		return sent, true, nil
	case err == nil:
		d.noteAlive(sid, sent)
	case isCtxErr(err), transient(err), errors.Is(err, zk.ErrClosing):
		return sent, false, err
	}
	// The members of an ensemble, no such node (3.4), or another refusal
	// (an ACL changed by hand): the ensemble rule from now on.
	d.checking.Store(false)
	return sent, false, nil
}

// detect makes the first standalone check, when the Client is made, so that
// a first grant soon after finds its proof. A connection problem fails New
// and Open, as it does when they create the root.
func (d *zkDriver) detect(ctx context.Context) error {
	if _, _, err := d.checkStandalone(ctx, d.timeout()); err != nil {
		return d.wrapErr("read "+configNode, err)
	}
	return nil
}
