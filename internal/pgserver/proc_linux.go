package pgserver

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// tieToParent has the kernel send the child SIGINT (fast shutdown) when its
// parent thread dies, kill -9 included. The kernel clears the setting when
// the child's credentials change; Go sets it after switching to
// Credential, so it holds for a server run as another user (and postgres
// is no set-user-ID program, whose exec would clear it too).
func tieToParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGINT }

// postmasterOf reports whether pid is a live (not zombie) process whose
// working directory is dataDir: a postmaster works in its data directory,
// so a recycled pid does not pass.
func postmasterOf(pid int, dataDir string) bool {
	proc := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(proc + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// hold anything.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return false
	}
	cwd, err := os.Readlink(proc + "/cwd")
	if err != nil {
		return false
	}
	want, err := filepath.EvalSymlinks(dataDir)
	return err == nil && cwd == want
}
