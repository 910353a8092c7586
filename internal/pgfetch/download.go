package pgfetch

import (
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Hard limits on what a registry may send: the version document is a few
// kilobytes, the archives about 25 MB.
const (
	maxMetadata = 4 << 20
	maxArchive  = 512 << 20
)

// metadata is what Fetch takes from a release's version document.
type metadata struct {
	tarball   *url.URL
	integrity []byte // the SHA-512 of the archive
}

// metadata fetches the version document of release
// (<registry>/@embedded-postgres%2f<platform>/<release>).
func (o *Options) metadata(ctx context.Context, release string) (*metadata, error) {
	base, err := url.Parse(strings.TrimSuffix(o.Registry, "/"))
	if err != nil || base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("pgfetch: registry %q: want an https:// URL", redact(o.Registry))
	}
	pkg := Scope + "/" + o.Platform
	doc := *base
	doc.Path = base.Path + "/" + pkg + "/" + release
	// npm's registries want the scope's slash escaped, as npm sends it.
	doc.RawPath = base.EscapedPath() + "/" + strings.ReplaceAll(url.PathEscape(pkg), "%2F", "%2f") + "/" + url.PathEscape(release)
	ctx, cancel := context.WithTimeout(ctx, o.MetadataTimeout)
	defer cancel()
	resp, err := o.get(ctx, &doc)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v struct {
		Dist struct {
			Tarball   string `json:"tarball"`
			Integrity string `json:"integrity"`
		} `json:"dist"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxMetadata)).Decode(&v); err != nil {
		return nil, fmt.Errorf("pgfetch: %s: %w", doc.Redacted(), err)
	}
	m := &metadata{}
	if m.integrity, err = parseIntegrity(v.Dist.Integrity); err != nil {
		return nil, fmt.Errorf("pgfetch: %s: %w", doc.Redacted(), err)
	}
	if m.tarball, err = url.Parse(v.Dist.Tarball); err != nil || m.tarball.Scheme != "https" || m.tarball.Host == "" {
		return nil, fmt.Errorf("pgfetch: %s: archive URL %q: want an https:// URL", doc.Redacted(), redact(v.Dist.Tarball))
	}
	return m, nil
}

// parseIntegrity takes the SHA-512 of a Subresource Integrity value
// ("sha512-<base64>", possibly among others of weaker algorithms).
func parseIntegrity(s string) ([]byte, error) {
	for _, f := range strings.Fields(s) {
		alg, b64, ok := strings.Cut(f, "-")
		if !ok || alg != "sha512" {
			continue
		}
		if i := strings.IndexByte(b64, '?'); i >= 0 {
			b64 = b64[:i]
		}
		sum, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sum) != sha512.Size {
			return nil, fmt.Errorf("integrity %q: not a SHA-512", f)
		}
		return sum, nil
	}
	return nil, fmt.Errorf("no sha512 integrity in %q: the archive could not be checked", s)
}

// get sends a GET and returns a 200 response. Failures to
// reach the registry, and a 404, wrap ErrUnavailable.
func (o *Options) get(ctx context.Context, u *url.URL) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("pgfetch: %w", err)
	}
	req.Header.Set("Accept", "application/json, application/octet-stream")
	resp, err := o.Client.Do(req)
	if err != nil {
		// url.Error repeats the URL with any credentials it holds.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("pgfetch: GET %s: %w (%w)", u.Redacted(), err, ErrUnavailable)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		err := fmt.Errorf("pgfetch: GET %s: %s", u.Redacted(), resp.Status)
		if resp.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("%w (%w)", err, ErrUnavailable)
		}
		return nil, err
	}
	return resp, nil
}

// download fetches the archive into a new file of the cache, checks its
// SHA-512 and renames it to archive.
func (o *Options) download(ctx context.Context, m *metadata, release, archive string) error {
	ctx, cancel := context.WithTimeout(ctx, o.DownloadTimeout)
	defer cancel()
	ctx, stalled := context.WithCancelCause(ctx)
	defer stalled(nil)
	o.Logger.Info("downloading PostgreSQL", "release", release, "platform", o.Platform, "from", m.tarball.Redacted())
	resp, err := o.get(ctx, m.tarball)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	tmp, err := os.CreateTemp(filepath.Dir(archive), filepath.Base(archive)+".tmp-")
	if err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	defer os.Remove(tmp.Name()) // nothing left once renamed
	defer tmp.Close()

	// A connection that stays open but sends nothing ends after
	// StallTimeout rather than at DownloadTimeout.
	watchdog := time.AfterFunc(o.StallTimeout, func() {
		stalled(fmt.Errorf("nothing received for %s (%w)", o.StallTimeout, ErrUnavailable))
	})
	defer watchdog.Stop()
	sum := sha512.New()
	p := &progress{w: o.Progress, what: "PostgreSQL " + release + " (" + o.Platform + ")", total: resp.ContentLength}
	n, err := io.Copy(io.MultiWriter(tmp, sum, p), &stallReader{r: io.LimitReader(resp.Body, maxArchive+1), watchdog: watchdog, stall: o.StallTimeout})
	p.done()
	if err != nil {
		if c := context.Cause(ctx); c != nil {
			err = c
		}
		return fmt.Errorf("pgfetch: downloading %s: %w", m.tarball.Redacted(), err)
	}
	if n > maxArchive {
		return fmt.Errorf("pgfetch: %s is larger than %d bytes", m.tarball.Redacted(), maxArchive)
	}
	if err := checkSum(sum, m.integrity); err != nil {
		return fmt.Errorf("pgfetch: %s: %w; nothing was unpacked", m.tarball.Redacted(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	if err := os.Rename(tmp.Name(), archive); err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	return nil
}

// verifyFile checks the SHA-512 of the file at path.
func verifyFile(path string, want []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sum := sha512.New()
	if _, err := io.Copy(sum, f); err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	return checkSum(sum, want)
}

// ErrIntegrity is wrapped by the error of an archive whose SHA-512 is not
// the registry's.
var ErrIntegrity = errors.New("integrity check failed")

func checkSum(h hash.Hash, want []byte) error {
	if got := h.Sum(nil); string(got) != string(want) {
		return fmt.Errorf("%w: sha512-%s, the registry says sha512-%s", ErrIntegrity,
			base64.StdEncoding.EncodeToString(got), base64.StdEncoding.EncodeToString(want))
	}
	return nil
}

// stallReader pushes the watchdog back on every read that brings data.
type stallReader struct {
	r        io.Reader
	watchdog *time.Timer
	stall    time.Duration
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.watchdog.Reset(s.stall)
	}
	return n, err
}

// redact masks the password of a URL given as text.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(an unparsable URL)"
}
