package users

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strings"

	"github.com/xdg-go/scram"
)

// Conversation is the server side of one SCRAM exchange (RFC 5802, no
// channel binding), checked against a users file: client-first, then
// client-final with the proof.
//
// It differs from the RFC in one place, as Kafka's broker does: the nonce
// of the client-final message must end with the nonce the server sent,
// not equal it. librdkafka (kcat, confluent-kafka-*) sends its own nonce
// again in front of the combined one, and Kafka accepts that (its
// ScramSaslServer checks endsWith); the proof covers the nonce as sent, so
// nothing is weakened. That is why VDL does not use xdg-go/scram's server,
// which rejects librdkafka.
type Conversation struct {
	users     *File
	mechanism string
	newHash   func() hash.Hash

	step        int
	user        string
	cred        scram.StoredCredentials
	firstBare   string // client-first-message-bare
	serverFirst string
	nonce       string // client nonce + server nonce
	gs2Header   string
	done        bool
}

// NewConversation starts a SCRAM exchange for mechanism (ScramSHA256 or
// ScramSHA512).
func (f *File) NewConversation(mechanism string) (*Conversation, error) {
	c := &Conversation{users: f, mechanism: mechanism}
	switch mechanism {
	case ScramSHA256:
		c.newHash = sha256.New
	case ScramSHA512:
		c.newHash = sha512.New
	default:
		return nil, fmt.Errorf("unknown SCRAM mechanism %q", mechanism)
	}
	return c, nil
}

// ErrAuthentication is every failed proof, unknown user or malformed
// message: what the client is told (the wrapped reason is for the log).
var ErrAuthentication = errors.New("invalid credentials")

func authErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrAuthentication, fmt.Sprintf(format, args...))
}

// Step takes the client's next message and returns the server's; done once
// the client proved its password.
func (c *Conversation) Step(msg string) (answer string, done bool, err error) {
	switch c.step {
	case 0:
		c.step++
		answer, err = c.clientFirst(msg)
		return answer, false, err
	case 1:
		c.step++
		answer, err = c.clientFinal(msg)
		if err != nil {
			return "", false, err
		}
		c.done = true
		return answer, true, nil
	}
	return "", false, authErr("SCRAM exchange already over")
}

// User is the authenticated user, once done.
func (c *Conversation) User() string {
	if !c.done {
		return ""
	}
	return c.user
}

// clientFirst: gs2-header ("n,," or "y,,", optionally with an authzid
// equal to the user) then "n=user,r=nonce[,extensions]".
func (c *Conversation) clientFirst(msg string) (string, error) {
	parts := strings.SplitN(msg, ",", 3)
	if len(parts) != 3 {
		return "", authErr("malformed client-first message")
	}
	switch parts[0] {
	case "n", "y":
	default:
		return "", authErr("channel binding %q is not supported", parts[0])
	}
	c.gs2Header = parts[0] + "," + parts[1] + ","
	c.firstBare = parts[2]
	attrs := strings.Split(c.firstBare, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") {
		return "", authErr("malformed client-first-message-bare")
	}
	for _, ext := range attrs[2:] {
		if strings.HasPrefix(ext, "tokenauth=") {
			return "", authErr("delegation tokens are not supported")
		}
	}
	name, err := saslName(attrs[0][2:])
	if err != nil {
		return "", err
	}
	if parts[1] != "" && parts[1] != "a="+attrs[0][2:] {
		return "", authErr("acting as another user is not supported")
	}
	cnonce := attrs[1][2:]
	if cnonce == "" || strings.ContainsAny(cnonce, ",") {
		return "", authErr("bad client nonce")
	}
	c.user = name
	if c.cred, err = c.users.Lookup(c.mechanism, name); err != nil {
		return "", authErr("%v", err)
	}
	snonce := make([]byte, 24)
	if _, err := rand.Read(snonce); err != nil {
		return "", err
	}
	c.nonce = cnonce + base64.RawStdEncoding.EncodeToString(snonce)
	c.serverFirst = fmt.Sprintf("r=%s,s=%s,i=%d", c.nonce,
		base64.StdEncoding.EncodeToString([]byte(c.cred.Salt)), c.cred.Iters)
	return c.serverFirst, nil
}

// clientFinal: "c=base64(gs2-header),r=nonce[,extensions],p=proof".
func (c *Conversation) clientFinal(msg string) (string, error) {
	k := strings.LastIndex(msg, ",p=")
	if k < 0 {
		return "", authErr("client-final message without a proof")
	}
	withoutProof, proofB64 := msg[:k], msg[k+3:]
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "c=") || !strings.HasPrefix(attrs[1], "r=") {
		return "", authErr("malformed client-final message")
	}
	if attrs[0][2:] != base64.StdEncoding.EncodeToString([]byte(c.gs2Header)) {
		return "", authErr("channel binding does not match the client-first message")
	}
	if !strings.HasSuffix(attrs[1][2:], c.nonce) {
		return "", authErr("nonce does not end with the server's")
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil || len(proof) != c.newHash().Size() {
		return "", authErr("malformed proof")
	}
	authMessage := []byte(c.firstBare + "," + c.serverFirst + "," + withoutProof)
	clientSignature := c.hmac(c.cred.StoredKey, authMessage)
	clientKey := make([]byte, len(proof))
	for i := range proof {
		clientKey[i] = proof[i] ^ clientSignature[i]
	}
	h := c.newHash()
	h.Write(clientKey)
	if subtle.ConstantTimeCompare(h.Sum(nil), c.cred.StoredKey) != 1 {
		return "", authErr("wrong password for user %q", c.user)
	}
	return "v=" + base64.StdEncoding.EncodeToString(c.hmac(c.cred.ServerKey, authMessage)), nil
}

func (c *Conversation) hmac(key, msg []byte) []byte {
	m := hmac.New(c.newHash, key)
	m.Write(msg)
	return m.Sum(nil)
}

// saslName decodes a SCRAM user name (=2C is ',', =3D is '=').
func saslName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", authErr("malformed user name")
		}
		i += 2
	}
	return b.String(), nil
}
