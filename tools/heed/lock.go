package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"golang.org/x/sys/unix"
)

// lockFileName is the file in a data directory that `heed up` holds an
// exclusive flock on while it runs: two servers on one JetStream store
// would corrupt it. The kernel drops the lock when the process ends, even
// on kill -9, so a stale file never blocks a restart.
const lockFileName = "heed.lock"

// lockInfo is what the holder records in the lock file, so that a second
// `heed up` can name it.
type lockInfo struct {
	PID     int       `json:"pid"`
	Host    string    `json:"host,omitempty"`
	Listen  string    `json:"listen,omitempty"` // the NATS URL, once it listens
	Started time.Time `json:"started"`
}

// dataLock is a held lock on a data directory.
type dataLock struct {
	f    *os.File
	info lockInfo
}

// lockDataDir takes the data directory's lock or fails at once, naming the
// process that holds it.
func lockDataDir(dir string) (*dataLock, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data directory lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, lockedError(dir, path)
		}
		return nil, fmt.Errorf("data directory lock %s: %w", path, err)
	}
	host, _ := os.Hostname()
	l := &dataLock{f: f, info: lockInfo{PID: os.Getpid(), Host: host, Started: time.Now().UTC()}}
	if err := l.write(); err != nil {
		l.release()
		return nil, err
	}
	return l, nil
}

// setListen records where the server listens.
func (l *dataLock) setListen(url string) error {
	l.info.Listen = url
	return l.write()
}

func (l *dataLock) write() error {
	b, _ := json.Marshal(l.info)
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("data directory lock: %w", err)
	}
	if _, err := l.f.WriteAt(append(b, '\n'), 0); err != nil {
		return fmt.Errorf("data directory lock: %w", err)
	}
	return nil
}

// release empties the file (nobody holds it now) and drops the lock.
func (l *dataLock) release() {
	_ = l.f.Truncate(0)
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	_ = l.f.Close()
}

// lockedError names the holder of dir's lock as it recorded itself. The
// holder may be between taking the lock and writing the file: read again
// briefly before saying it is unknown.
func lockedError(dir, path string) error {
	var info lockInfo
	for i := 0; i < 10; i++ {
		b, err := os.ReadFile(path)
		if err == nil && json.Unmarshal(b, &info) == nil && info.PID != 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	who := "another process"
	if info.PID != 0 {
		var parts []string
		parts = append(parts, fmt.Sprintf("pid %d", info.PID))
		if info.Host != "" {
			parts = append(parts, "on "+info.Host)
		}
		if info.Listen != "" {
			parts = append(parts, "listening on "+info.Listen)
		}
		if !info.Started.IsZero() {
			parts = append(parts, "since "+info.Started.Local().Format(time.DateTime))
		}
		who = "another heed up (" + strings.Join(parts, ", ") + ")"
	}
	hint := "stop it first, or use another --data directory"
	if info.Listen != "" {
		hint = "use that one (export HEED_NATS_URL=" + info.Listen + "), stop it first, or use another --data directory"
	}
	return events.Errorf(events.CodeConflict, "data directory %s is in use by %s: %s", dir, who, hint)
}
