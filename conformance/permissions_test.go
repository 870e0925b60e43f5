package conformance

// Production access: a NATS server that requires mutual TLS and nkey
// users, with the roles `heed deploy permissions` writes; heed up runs
// against it as the service role, and plain nats.go clients take the
// other roles, as an agent, a chat bridge or an operator would. Every
// refusal must be visible to the one refused: a permissions violation on
// the connection (and, for heed's own client, an error with code
// forbidden), and nothing written to the log.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// testPKI is a CA, a server certificate for 127.0.0.1 and localhost, and
// one client certificate, generated for the test (docs/PRODUCTION.md
// shows the same with openssl).
type testPKI struct {
	dir                         string
	ca, serverCert, serverKey   string
	clientCert, clientKey       string
	otherCACert, otherClientKey string
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newKey(t *testing.T, path string) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
	return k
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	p := &testPKI{dir: dir, ca: filepath.Join(dir, "ca.pem"), serverCert: filepath.Join(dir, "server.pem"), serverKey: filepath.Join(dir, "server-key.pem"),
		clientCert: filepath.Join(dir, "client.pem"), clientKey: filepath.Join(dir, "client-key.pem")}
	serial := int64(1)
	issue := func(tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, key *ecdsa.PrivateKey, path string) *x509.Certificate {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, path, "CERTIFICATE", der)
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	caKey := newKey(t, filepath.Join(dir, "ca-key.pem"))
	ca := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "heed test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, nil, nil, caKey, p.ca)
	issue(&x509.Certificate{Subject: pkix.Name{CommonName: "nats"}, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, caKey, newKey(t, p.serverKey), p.serverCert)
	issue(&x509.Certificate{Subject: pkix.Name{CommonName: "heed-client"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, caKey, newKey(t, p.clientKey), p.clientCert)
	// A client certificate from a CA the server does not trust.
	p.otherCACert, p.otherClientKey = filepath.Join(dir, "other.pem"), filepath.Join(dir, "other-key.pem")
	otherKey := newKey(t, filepath.Join(dir, "other-ca-key.pem"))
	other := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "someone else's CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}, nil, nil, otherKey, filepath.Join(dir, "other-ca.pem"))
	issue(&x509.Certificate{Subject: pkix.Name{CommonName: "intruder"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		other, otherKey, newKey(t, p.otherClientKey), p.otherCACert)
	return p
}

// roleConn is a plain nats.go client with one role's seed, over mTLS. It
// records the permission violations the server reports to it.
type roleConn struct {
	*nats.Conn
	js jetstream.JetStream

	mu     sync.Mutex
	denied []string
}

func (c *roleConn) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.denied...)
}

// waitDenied waits until the server has reported a violation naming
// subject.
func (c *roleConn) waitDenied(t *testing.T, what, subject string) {
	t.Helper()
	checkFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		for _, v := range c.violations() {
			if strings.Contains(v, `"`+subject+`"`) {
				return nil
			}
		}
		return fmt.Errorf("%s: no permissions violation for %s reported (got %q)", what, subject, c.violations())
	})
}

// refused sends a command the role may not send: no reply comes, and the
// server reports the violation to the sender.
func (c *roleConn) refused(t *testing.T, what, subject string, body any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := c.Request(subject, b, 2*time.Second); err == nil {
		t.Errorf("%s: served, reply %s", what, m.Data)
	}
	c.waitDenied(t, what, subject)
}

func connectAs(t *testing.T, url string, pki *testPKI, seed string, opts ...nats.Option) *roleConn {
	t.Helper()
	rc := &roleConn{}
	nkey, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("conformance-" + strings.TrimSuffix(filepath.Base(seed), ".nk")), nkey,
		nats.RootCAs(pki.ca), nats.ClientCert(pki.clientCert, pki.clientKey), nats.Timeout(5 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				rc.mu.Lock()
				rc.denied = append(rc.denied, err.Error())
				rc.mu.Unlock()
			}
		})}, opts...)...)
	if err != nil {
		t.Fatalf("connect as %s: %v", seed, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rc.Conn, rc.js = nc, js
	return rc
}

// startSecuredNATS runs nats-server requiring mTLS, with the users and
// roles of dir/heed-permissions.conf.
func startSecuredNATS(t *testing.T, pki *testPKI, secrets string) (url string) {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	// An include is relative to the including file's directory.
	perms, err := os.ReadFile(filepath.Join(secrets, "heed-permissions.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "heed-permissions.conf"), perms, 0o644); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`listen: 127.0.0.1:%d
server_name: secured
jetstream { store_dir: %q }
tls {
  cert_file: %q
  key_file: %q
  ca_file: %q
  verify: true
}
include heed-permissions.conf
`, port, filepath.Join(dir, "js"), pki.serverCert, pki.serverKey, pki.ca)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &natsServer{t: t, port: port, dir: dir, done: make(chan struct{})}
	s.cmd = exec.Command(natsServerBin, "-c", conf)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("--- nats-server ---\n%s", lastLines(s.out.String(), 60))
		}
	})
	checkFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(s.out.String(), "Server is ready") {
			select {
			case <-s.done:
				t.Fatalf("nats-server exited:\n%s", s.out.String())
			default:
			}
			return errors.New("not ready")
		}
		return nil
	})
	return fmt.Sprintf("nats://127.0.0.1:%d", port)
}

// heedCLI runs the heed CLI with args and the TLS flags; it returns its
// output and exit status.
func heedCLI(t *testing.T, pki *testPKI, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(heedBin, append(args, "--nats-ca", pki.ca, "--nats-cert", pki.clientCert, "--nats-key", pki.clientKey)...)
	cmd.Dir = repoRoot
	cmd.Env = childEnv(t.TempDir())
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func TestPermissionsAndTLS(t *testing.T) {
	pki := newPKI(t)
	secrets := filepath.Join(t.TempDir(), "secrets")
	out, code := heedCLI(t, pki, "deploy", "permissions", "--out", secrets,
		"--user", "services:service", "--user", "agent:agent", "--user", "slack:bridge", "--user", "alice-ops:ops")
	if code != 0 {
		t.Fatalf("heed deploy permissions: exit %d\n%s", code, out)
	}
	if st, err := os.Stat(filepath.Join(secrets, "agent.nk")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("agent seed: %v, %v; want a file of mode 0600", st, err)
	}
	url := startSecuredNATS(t, pki, secrets)

	// Without a client certificate, or with one from another CA, or
	// without a user: no connection at all.
	if nc, err := nats.Connect(url, nats.RootCAs(pki.ca), nats.Timeout(3*time.Second)); err == nil {
		nc.Close()
		t.Error("connected without a client certificate")
	}
	if nc, err := nats.Connect(url, nats.RootCAs(pki.ca), nats.ClientCert(pki.otherCACert, pki.otherClientKey), nats.Timeout(3*time.Second)); err == nil {
		nc.Close()
		t.Error("connected with a certificate of an unknown CA")
	}
	if nc, err := nats.Connect(url, nats.RootCAs(pki.ca), nats.ClientCert(pki.clientCert, pki.clientKey), nats.Timeout(3*time.Second)); err == nil {
		nc.Close()
		t.Error("connected with a certificate but no user")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("no user: %v, want an authorization violation", err)
	}

	h := startHeedAs(t, pki, url, filepath.Join(secrets, "services.nk"))

	agent := connectAs(t, url, pki, filepath.Join(secrets, "agent.nk"))
	bridge := connectAs(t, url, pki, filepath.Join(secrets, "slack.nk"))
	ops := connectAs(t, url, pki, filepath.Join(secrets, "alice-ops.nk"))
	h.nc, h.js = agent.Conn, agent.js

	// The agent starts a run and watches it pause (commands, the log's
	// read API and its subjects are the agent's).
	runID, confirmID, run := pauseAtConfirm(t, h, confirmSkill(600))

	// It follows the log with consumers of its own, but may not rewrite a
	// service's durable by naming it (JetStream's create is
	// create-or-update): the runner's filter stays its own.
	if _, err := agent.js.CreateOrUpdateConsumer(ctxFor(t, 3*time.Second), eventStream, jetstream.ConsumerConfig{Durable: "runner", FilterSubject: "heed.nothing"}); err == nil {
		t.Error("the agent rewrote the runner's durable consumer")
	}
	agent.waitDenied(t, "the agent rewrites the runner's durable", "$JS.API.CONSUMER.CREATE."+eventStream+".runner.heed.nothing")
	// Every durable heed keeps is one the roles may not name (the deny
	// list of heed deploy permissions, access.ServiceDurables).
	perms, err := os.ReadFile(filepath.Join(secrets, "heed-permissions.conf"))
	if err != nil {
		t.Fatal(err)
	}
	svc := connectAs(t, url, pki, filepath.Join(secrets, "services.nk"))
	stream, err := svc.js.Stream(ctxFor(t, 5*time.Second), eventStream)
	if err != nil {
		t.Fatal(err)
	}
	checkFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		list := stream.ListConsumers(ctxFor(t, 5*time.Second))
		n := 0
		for ci := range list.Info() {
			name := ci.Config.Durable
			if name == "" {
				continue // an ordered consumer of a reader's
			}
			n++
			if !strings.Contains(string(perms), `"$JS.API.CONSUMER.CREATE.`+eventStream+`.`+name+`"`) {
				return fmt.Errorf("durable %s is not in the roles' deny list (add it to access.ServiceDurables)", name)
			}
		}
		if n < 16 {
			return fmt.Errorf("%d durables so far", n)
		}
		return list.Err()
	})
	if ci, err := stream.Consumer(ctxFor(t, 5*time.Second), "runner"); err != nil || ci.CachedInfo().Config.FilterSubject == "heed.nothing" {
		t.Errorf("the runner's durable after the agent's try: %v %+v", err, ci)
	}

	// It may not answer, by command or straight to the log.
	agent.refused(t, "agent answers by command", "heed.cmd.confirm.answer", map[string]any{"id": confirmID, "choice": "proceed", "by": "agent/sneaky"})
	ans := eventMsg("heed.confirm.answered", confirmID, confirmID+"/answer/sneaky", map[string]any{"choice": "proceed", "method": "user", "by": "agent/sneaky"})
	if _, err := agent.js.PublishMsg(ctxFor(t, 3*time.Second), ans); err == nil {
		t.Error("the agent's answered event was stored")
	}
	agent.waitDenied(t, "agent publishes an answer", "heed.confirm."+confirmID+".answered")
	// Nor write another kind's events (learned state).
	pref := eventMsg("heed.pref.set", "pref-00000000000000000000", "pref-sneaky", map[string]any{"choice": "proceed"})
	if err := agent.PublishMsg(pref); err != nil {
		t.Fatal(err)
	}
	agent.waitDenied(t, "agent writes a preference", "heed.pref.pref-00000000000000000000.set")
	// Nor the run events only heed's services write, though it writes a
	// run's others: a heal's verdict scores a learned fix (a made-up
	// gave_up halves a person's fix's confidence), a requested event
	// carries the skill the runner was asked for.
	healed := eventMsg("heed.run.heal.healed", "forged-run", "forged-run/heal/healed", map[string]any{"step": "deploy", "index": 0, "attempt": 2, "fix_id": "fix-0123456789abcdef"})
	if err := agent.PublishMsg(healed); err != nil {
		t.Fatal(err)
	}
	agent.waitDenied(t, "agent writes a heal's verdict", "heed.run.forged-run.heal.healed")
	requested := eventMsg("heed.run.requested", "forged-run", "forged-run/requested", map[string]any{"skill": "x"})
	if err := agent.PublishMsg(requested); err != nil {
		t.Fatal(err)
	}
	agent.waitDenied(t, "agent writes a run's requested event", "heed.run.forged-run.requested")

	// Operators read everything and write nothing.
	if _, err := ops.js.Stream(ctxFor(t, 5*time.Second), eventStream); err != nil {
		t.Errorf("ops reads the stream's info: %v", err)
	}
	if m, err := ops.js.Conn().Request("heed.svc.confirm-router.health", nil, 5*time.Second); err != nil || !strings.Contains(string(m.Data), `"status"`) {
		t.Errorf("ops asks a service's health: %v", err)
	}
	if err := ops.js.DeleteStream(ctxFor(t, 3*time.Second), eventStream); err == nil {
		t.Error("ops deleted the event stream")
	}
	ops.waitDenied(t, "ops deletes the stream", "$JS.API.STREAM.DELETE."+eventStream)
	if err := ops.js.Conn().Publish("$JS.API.STREAM.PURGE."+eventStream, nil); err != nil {
		t.Fatal(err)
	}
	ops.waitDenied(t, "ops purges the stream", "$JS.API.STREAM.PURGE."+eventStream)
	ops.refused(t, "ops answers", "heed.cmd.confirm.answer", map[string]any{"id": confirmID, "choice": "proceed", "by": "user:alice"})

	// The bridge answers only through the command: not as an event, and
	// no other kind of write.
	bridgeAns := eventMsg("heed.confirm.answered", confirmID, confirmID+"/answer/bridge-direct", map[string]any{"choice": "proceed", "method": "user", "by": "user:bob"})
	if err := bridge.PublishMsg(bridgeAns); err != nil {
		t.Fatal(err)
	}
	bridge.waitDenied(t, "bridge publishes an answer", "heed.confirm."+confirmID+".answered")
	bridge.refused(t, "bridge starts a run", "heed.cmd.run.start", map[string]any{"skill": map[string]any{"source": confirmSkill(60)}})
	// Nothing of the refused writes reached the log.
	for _, subject := range []string{"heed.confirm." + confirmID + ".answered", "heed.pref.pref-00000000000000000000.set", "heed.run.forged-run.heal.healed", "heed.run.forged-run.requested"} {
		if m, err := lastMsg(agent.js, subject); err == nil {
			t.Errorf("a refused write is in the log: %s %s", subject, m.Data)
		}
	}
	var rep answerReply
	mustRequest(t, bridge.Conn, "heed.cmd.confirm.answer", map[string]any{"id": confirmID, "choice": "proceed", "by": "user:bob", "channel": "slack"}, &rep)
	if rep.Method != "user" || rep.By != "user:bob" {
		t.Errorf("the bridge's answer: %+v", rep)
	}
	done := run.waitSubject(30*time.Second, "heed.run."+runID+".completed")
	t.Logf("run %s completed after the bridge's answer: %s", runID, done.Data)

	// heed refuses an answer from someone a request does not allow, with
	// the reason, whoever relays it.
	var cr struct {
		ID string `json:"id"`
	}
	mustRequest(t, agent.Conn, "heed.cmd.confirm.request", map[string]any{"title": "Drop table?", "message": "Drop table sessions?",
		"options": []map[string]string{{"label": "Drop", "value": "proceed"}, {"label": "Keep", "value": "cancel"}}, "default": "cancel",
		"timeout_s": 600, "requester": "agent/dba", "approvers": []string{"user:alice"}}, &cr)
	err = request(bridge.Conn, "heed.cmd.confirm.answer", map[string]any{"id": cr.ID, "choice": "proceed", "by": "user:mallory", "channel": "slack"}, nil)
	var ce *cmdError
	if !errors.As(err, &ce) || !strings.Contains(ce.Message, "user:mallory may not answer") {
		t.Errorf("an answer by someone not among the approvers: %v; want a refusal naming them", err)
	}

	// heed's own CLI says forbidden at once (not a timeout) when its
	// credentials do not allow a command.
	start := time.Now()
	out, code = heedCLI(t, pki, "confirm", "answer", cr.ID, "proceed", "--nats-url", url, "--nats-nkey", filepath.Join(secrets, "alice-ops.nk"))
	if code == 0 || !strings.Contains(out, "forbidden") || !strings.Contains(out, "heed.cmd.confirm.answer") || time.Since(start) > 10*time.Second {
		t.Errorf("heed confirm answer as ops: exit %d after %s:\n%s\nwant forbidden, naming the subject, at once", code, time.Since(start).Round(time.Millisecond), out)
	}
	// Reading with the ops role works.
	out, code = heedCLI(t, pki, "runs", "--nats-url", url, "--nats-nkey", filepath.Join(secrets, "alice-ops.nk"))
	if code != 0 || !strings.Contains(out, runID) {
		t.Errorf("heed runs as ops: exit %d\n%s", code, out)
	}
	// So do the checks OPERATIONS.md's "What to watch" gives operators:
	// the dead letters from a script, and the consumers' list.
	// (heed events tail follows an ordered consumer, as here.)
	if _, err := ops.js.OrderedConsumer(ctxFor(t, 5*time.Second), "HEED_DLQ", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"heed.dlq.>"}}); err != nil {
		t.Errorf("ops follows the dead letters (heed events tail 'heed.dlq.>'): %v", err)
	}
	stream, err = ops.js.Stream(ctxFor(t, 5*time.Second), eventStream)
	if err != nil {
		t.Fatal(err)
	}
	names := stream.ConsumerNames(ctxFor(t, 5*time.Second))
	n := 0
	for range names.Name() {
		n++
	}
	if err := names.Err(); err != nil || n == 0 {
		t.Errorf("ops lists the event stream's consumers: %d, %v", n, err)
	}
	if strings.Contains(h.stderr.String(), "Permissions Violation") {
		t.Errorf("heed's services met a permissions violation with the service role:\n%s", h.stderr.String())
	}
}

// startHeedAs runs heed up against the secured server with the seed of a
// service user.
func startHeedAs(t *testing.T, pki *testPKI, url, seed string) *heed {
	t.Helper()
	h := &heed{t: t, url: url, done: make(chan struct{})}
	h.cmd = exec.Command(heedBin, "up", "--nats-url", url, "--tools", filepath.Join(repoRoot, "skills", "tools.yaml"),
		"--nats-nkey", seed, "--nats-ca", pki.ca, "--nats-cert", pki.clientCert, "--nats-key", pki.clientKey)
	h.cmd.Dir = repoRoot
	h.cmd.Env = childEnv(t.TempDir())
	h.cmd.Stdout, h.cmd.Stderr = &h.stdout, &h.stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.cmd.Wait(); close(h.done) }()
	t.Cleanup(h.stop)
	checkFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		select {
		case <-h.done:
			t.Fatalf("heed up exited (%v):\n%s", h.cmd.ProcessState, h.stderr.String())
		default:
		}
		if !strings.Contains(h.stdout.String(), "heed: ready") {
			return errors.New("not ready")
		}
		return nil
	})
	return h
}

// lastMsg reads the last message on subject (direct get).
func lastMsg(js jetstream.JetStream, subject string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, eventStream)
	if err != nil {
		return nil, err
	}
	return s.GetLastMsgForSubject(ctx, subject)
}
