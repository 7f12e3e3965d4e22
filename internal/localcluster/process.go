/*
Copyright 2026 The tpu-slice-operator Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package localcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopTimeout is how long a component has to exit after SIGTERM before it is killed.
const stopTimeout = 10 * time.Second

// process is one running component, its output in a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // valid once done is closed
}

// startProcess starts binary with args, its stdout and stderr appended to dir/<name>.log.
func startProcess(dir, name, binary string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath) //nolint:gosec // a path of our own working directory.
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...) //nolint:gosec // our own component binaries and flags.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited returns an error naming the component and its log when it is no longer running.
func (p *process) exited() error {
	select {
	case <-p.done:
		err := p.err
		if err == nil {
			err = errors.New("exit status 0")
		}
		return fmt.Errorf("%s exited (%w); its log ends with:\n%s", p.name, err, p.logTail())
	default:
		return nil
	}
}

// stop sends SIGTERM, waits up to stopTimeout, then kills the process.
func (p *process) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing %s: %w", p.name, err)
	}
	<-p.done
	return fmt.Errorf("%s did not stop within %s of SIGTERM and was killed", p.name, stopTimeout)
}

// logTail returns the last lines of the component's log.
func (p *process) logTail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	const keep = 4 << 10
	if len(data) > keep {
		data = data[len(data)-keep:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return string(data)
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on every Linux
// architecture Go supports.
const userHZ = 100

// parseStatCPUTime returns utime + stime of a /proc/<pid>/stat line. The command name (field 2)
// is in parentheses and may hold spaces and parentheses itself, so fields are counted from the
// last ')'.
func parseStatCPUTime(stat string) (time.Duration, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	// Fields from 3 (state) on; utime and stime are fields 14 and 15.
	fields := strings.Fields(stat[end+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing CPU ticks: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}
