// Package memory is an in-process global store: the counts and denials of
// several regions in one process, for tests and simulations of multi-region
// deployments without a database.
//
// It follows the contract of [global.Store] exactly, with one difference in
// cost: every call is a map or slice operation under one lock. Every
// change is also kept in the order of the store's change counter, so that
// a pull or a denial read visits only what changed after its cursor.
package memory

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/origin"
)

// Store is a [global.Store] kept in memory. Cursors are the store's own
// change counter. The zero value is not usable; create one with [New].
type Store struct {
	mu      sync.Mutex
	version int64 // incremented by every change
	counts  map[origin.Cell]*cellRows
	// changes holds a change of a count row per version, oldest first: a
	// row's last change is the one whose version is the row's, the others
	// (stale of them) are left for compact to drop.
	changes []change
	stale   int
	regions map[string]int64 // last announced, Unix ms
	denials map[origin.Cell]*denialRow
	// denialLog holds the denial rows in the order of their versions.
	denialLog []*denialRow
	// expiresFirst is at most the earliest expiry of a row of either kind:
	// Cleanup at an earlier time has nothing to delete.
	expiresFirst int64
}

// cellRows holds the regions' rows of one cell.
type cellRows struct {
	cell origin.Cell
	rows []*countRow // one per region, in the order they were created
}

// countRow is one region's row of a cell. Its version is that of its last
// change; 0 once deleted (or never raised above 0).
type countRow struct {
	of                        *cellRows
	region                    string
	count, expiresAt, version int64
}

// change is a change of a count row, at version.
type change struct {
	version int64
	row     *countRow
}

type denialRow struct {
	global.Denial
	version int64
}

var _ global.Store = (*Store)(nil)

// New returns an empty Store.
func New() *Store {
	return &Store{
		counts:       make(map[origin.Cell]*cellRows),
		regions:      make(map[string]int64),
		denials:      make(map[origin.Cell]*denialRow),
		expiresFirst: math.MaxInt64,
	}
}

// Publish implements [global.Store]. As the MySQL store, it does not
// announce region.
func (s *Store) Publish(ctx context.Context, region string, counts []global.Count, now int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range counts {
		r := s.row(c.Cell, region)
		r.expiresAt = max(r.expiresAt, c.ExpiresAt)
		s.expiresFirst = min(s.expiresFirst, r.expiresAt)
		if c.Count > r.count {
			if r.version > 0 {
				s.stale++
			}
			r.count = c.Count
			s.version++
			r.version = s.version
			s.changes = append(s.changes, change{version: s.version, row: r})
		}
	}
	s.compact()
	return nil
}

// row returns region's row of cell, created if needed.
func (s *Store) row(cell origin.Cell, region string) *countRow {
	cr := s.counts[cell]
	if cr == nil {
		cr = &cellRows{cell: cell}
		s.counts[cell] = cr
	}
	for _, r := range cr.rows {
		if r.region == region {
			return r
		}
	}
	r := &countRow{of: cr, region: region}
	cr.rows = append(cr.rows, r)
	return r
}

// compact drops the stale changes once they are half of them.
func (s *Store) compact() {
	if s.stale <= len(s.changes)/2 {
		return
	}
	s.changes = slices.DeleteFunc(s.changes, func(c change) bool { return c.version != c.row.version })
	s.stale = 0
}

// Announce implements [global.Store].
func (s *Store) Announce(ctx context.Context, region string, now int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.regions[region] = max(s.regions[region], now)
	return nil
}

// Pull implements [global.Store].
func (s *Store) Pull(ctx context.Context, region string, cursor global.Cursor, now, activeFor int64) (global.Pull, error) {
	if err := ctx.Err(); err != nil {
		return global.Pull{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pull(region, cursor, now, activeFor), nil
}

// PullWithDenials implements [global.PullerWithDenials]: Pull and Denials
// under one lock.
func (s *Store) PullWithDenials(ctx context.Context, region string, cursor, denialCursor global.Cursor, now, activeFor int64) (global.Pull, []global.Denial, global.Cursor, error) {
	if err := ctx.Err(); err != nil {
		return global.Pull{}, nil, denialCursor, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ds, next := s.readDenials(region, denialCursor, now)
	return s.pull(region, cursor, now, activeFor), ds, next, nil
}

// pull is Pull with s.mu held: every entry changed after cursor whose
// cell has a row active at now, in the order of their changes.
func (s *Store) pull(region string, cursor global.Cursor, now, activeFor int64) global.Pull {
	p := global.Pull{Next: global.Cursor(s.version)}
	from, _ := slices.BinarySearchFunc(s.changes, int64(cursor)+1, func(c change, v int64) int {
		return cmp.Compare(c.version, v)
	})
	if n := len(s.changes) - from; n > 0 {
		p.Entries = make([]global.Entry, 0, n) // less the stale changes
	}
	for _, c := range s.changes[from:] {
		r := c.row
		if c.version == r.version && active(r.of, now) {
			p.Entries = append(p.Entries, global.Entry{Cell: r.of.cell, Region: r.region, Count: r.count})
		}
	}
	for r, seen := range s.regions {
		if seen > now-activeFor || r == region {
			p.Regions++
		}
	}
	if _, ok := s.regions[region]; !ok {
		p.Regions++
	}
	return p
}

// active reports whether a row of the cell is active at now.
func active(cr *cellRows, now int64) bool {
	for _, r := range cr.rows {
		if r.expiresAt > now {
			return true
		}
	}
	return false
}

// EmitDenials implements [global.Store].
func (s *Store) EmitDenials(ctx context.Context, denials []global.Denial) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range denials {
		if _, ok := s.denials[d.Cell]; ok {
			continue
		}
		s.version++
		row := &denialRow{Denial: d, version: s.version}
		s.denials[d.Cell] = row
		s.denialLog = append(s.denialLog, row)
		s.expiresFirst = min(s.expiresFirst, d.ExpiresAt)
	}
	return nil
}

// Denials implements [global.Store].
func (s *Store) Denials(ctx context.Context, region string, cursor global.Cursor, now int64) ([]global.Denial, global.Cursor, error) {
	if err := ctx.Err(); err != nil {
		return nil, cursor, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ds, next := s.readDenials(region, cursor, now)
	return ds, next, nil
}

// readDenials is Denials with s.mu held, in the order of the rows'
// versions.
func (s *Store) readDenials(region string, cursor global.Cursor, now int64) ([]global.Denial, global.Cursor) {
	from, _ := slices.BinarySearchFunc(s.denialLog, int64(cursor)+1, func(d *denialRow, v int64) int {
		return cmp.Compare(d.version, v)
	})
	var out []global.Denial
	for _, d := range s.denialLog[from:] {
		if d.ExpiresAt > now && d.Region != region {
			out = append(out, d.Denial)
		}
	}
	return out, global.Cursor(s.version)
}

// Cleanup implements [global.Store]: it deletes every expired row at once.
func (s *Store) Cleanup(ctx context.Context, now int64, _ int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now < s.expiresFirst {
		return 0, nil
	}
	s.expiresFirst = math.MaxInt64
	n := 0
	for cell, cr := range s.counts {
		cr.rows = slices.DeleteFunc(cr.rows, func(r *countRow) bool {
			if r.expiresAt > now {
				s.expiresFirst = min(s.expiresFirst, r.expiresAt)
				return false
			}
			if r.version > 0 {
				s.stale++
			}
			r.version = 0
			n++
			return true
		})
		if len(cr.rows) == 0 {
			delete(s.counts, cell)
		}
	}
	s.compact()
	s.denialLog = slices.DeleteFunc(s.denialLog, func(d *denialRow) bool {
		if d.ExpiresAt > now {
			s.expiresFirst = min(s.expiresFirst, d.ExpiresAt)
			return false
		}
		delete(s.denials, d.Cell)
		n++
		return true
	})
	return n, nil
}

// Close implements [global.Store]; a memory Store needs no release.
func (s *Store) Close() error { return nil }
