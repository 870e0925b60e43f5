package console

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"
)

// User is one person who may sign in (the users file, docs/CONSOLE.md).
type User struct {
	// Identity is who the person is to heed: what answers carry in by,
	// what escalation tiers and approvers name (user:alice).
	Identity string `yaml:"identity"`
	Name     string `yaml:"name"`
	// PasswordBcrypt is a bcrypt hash of the password
	// (heed console hash-password).
	PasswordBcrypt string `yaml:"password_bcrypt"`
	// TokenSHA256 is the hex SHA-256 of a sign-in token, for people (or
	// kiosks) that sign in with a token instead of a password.
	TokenSHA256 string `yaml:"token_sha256"`
	// Operator may act on runs (continue, retry, cancel) and forget
	// learned state; everyone signed in may read them.
	Operator bool `yaml:"operator"`
}

// Users is the users file.
type Users struct {
	Users []User `yaml:"users"`
	byID  map[string]*User
}

// ReadUsers reads and checks a users file: every user has an identity
// and a password hash or a token hash, identities are unique.
func ReadUsers(path string) (*Users, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	return ParseUsers(path, b)
}

// ParseUsers is ReadUsers of a file's content.
func ParseUsers(path string, b []byte) (*Users, error) {
	var u Users
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&u); err != nil {
		return nil, fmt.Errorf("%s: %v", path, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	u.byID = map[string]*User{}
	var problems []string
	for i := range u.Users {
		x := &u.Users[i]
		switch {
		case strings.TrimSpace(x.Identity) == "":
			problems = append(problems, fmt.Sprintf("user %d has no identity", i+1))
		case x.PasswordBcrypt == "" && x.TokenSHA256 == "":
			problems = append(problems, fmt.Sprintf("user %s has neither password_bcrypt nor token_sha256: nobody could sign in as them", x.Identity))
		case x.PasswordBcrypt != "" && !strings.HasPrefix(x.PasswordBcrypt, "$2"):
			problems = append(problems, fmt.Sprintf("user %s: password_bcrypt is not a bcrypt hash (make one with heed console hash-password)", x.Identity))
		case x.TokenSHA256 != "" && !isHex64(x.TokenSHA256):
			problems = append(problems, fmt.Sprintf("user %s: token_sha256 is not 64 hex digits", x.Identity))
		case u.byID[x.Identity] != nil:
			problems = append(problems, fmt.Sprintf("user %s is listed twice", x.Identity))
		default:
			u.byID[x.Identity] = x
			if x.Name == "" {
				x.Name = x.Identity
			}
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s: %s", path, strings.Join(problems, "; "))
	}
	if len(u.byID) == 0 {
		return nil, fmt.Errorf("%s: no users: nobody could sign in", path)
	}
	return &u, nil
}

func isHex64(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 32
}

// dummyHash is compared against when the identity is unknown, so that a
// wrong name takes as long as a wrong password. A constant: hashing at
// start would cost every heed command a bcrypt (seconds in a race build).
var dummyHash = []byte("$2a$10$4v8nLhPSy5lMYc977AJprOxl9xdeomCBzx2H8hzQy.bhc0ic/08Ce")

// Check returns the user whose identity (or name) and secret (password
// or token) match.
func (u *Users) Check(login, secret string) (*User, bool) {
	x := u.byID[login]
	if x == nil {
		for i := range u.Users {
			if u.Users[i].Name == login {
				x = &u.Users[i]
				break
			}
		}
	}
	if x == nil {
		_ = bcrypt.CompareHashAndPassword(dummyHash, []byte(secret))
		return nil, false
	}
	if x.TokenSHA256 != "" {
		sum := sha256.Sum256([]byte(secret))
		want, _ := hex.DecodeString(x.TokenSHA256)
		if subtle.ConstantTimeCompare(sum[:], want) == 1 {
			return x, true
		}
	}
	if x.PasswordBcrypt != "" && bcrypt.CompareHashAndPassword([]byte(x.PasswordBcrypt), []byte(secret)) == nil {
		return x, true
	}
	return nil, false
}

// HashPassword is what heed console hash-password prints.
func HashPassword(password string) (string, error) {
	if len(password) < 8 {
		return "", errors.New("use a password of at least 8 characters")
	}
	b, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	return string(b), err
}

// HashToken is the token_sha256 of a token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// session is one signed-in browser.
type session struct {
	user    *User
	csrf    string
	expires time.Time
}

// sessions are kept in memory: a restart of the console signs everyone
// out, which is the safe side.
type sessions struct {
	mu   sync.Mutex
	byID map[string]*session
	ttl  time.Duration
	now  func() time.Time
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{byID: map[string]*session{}, ttl: ttl, now: time.Now}
}

func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *sessions) create(u *User) (id string, sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, v := range s.byID {
		if now.After(v.expires) {
			delete(s.byID, k)
		}
	}
	id = randomToken()
	sess = &session{user: u, csrf: randomToken(), expires: now.Add(s.ttl)}
	s.byID[id] = sess
	return id, sess
}

func (s *sessions) get(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.byID[id]
	if sess == nil || s.now().After(sess.expires) {
		delete(s.byID, id)
		return nil
	}
	return sess
}

func (s *sessions) end(id string) {
	s.mu.Lock()
	delete(s.byID, id)
	s.mu.Unlock()
}

const (
	sessionCookie = "heed_console"
	loginCookie   = "heed_console_login" // the login form's CSRF token
	csrfHeader    = "X-CSRF-Token"
	csrfField     = "csrf_token"
)

// cookie is an HttpOnly, SameSite=Strict cookie, Secure when the console
// is served over TLS (or told it is, behind a proxy).
func (s *Server) cookie(name, value string, maxAge int, r *http.Request) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || s.cfg.SecureCookies}
}

// checkCSRF accepts a state-changing request only with the session's
// token (header or form field) and, when the browser says where it comes
// from, from this origin.
func checkCSRF(r *http.Request, want string) error {
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		host := strings.TrimPrefix(strings.TrimPrefix(o, "https://"), "http://")
		if host != r.Host {
			return fmt.Errorf("request from another origin (%s)", o)
		}
	}
	got := r.Header.Get(csrfHeader)
	if got == "" {
		got = r.PostFormValue(csrfField)
	}
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return errors.New("missing or wrong CSRF token")
	}
	return nil
}

// ByToken returns the user a bearer token belongs to (token_sha256), for
// programs that sign in with a token alone (heed mcp --listen).
func (u *Users) ByToken(token string) (*User, bool) {
	sum := sha256.Sum256([]byte(token))
	var found *User
	for i := range u.Users {
		want, err := hex.DecodeString(u.Users[i].TokenSHA256)
		if err == nil && len(want) == len(sum) && subtle.ConstantTimeCompare(sum[:], want) == 1 {
			found = &u.Users[i]
		}
	}
	return found, found != nil
}
