// Package memory is an in-process global store: the counts and denials of
// several regions in one process, for tests and simulations of multi-region
// deployments without a database.
//
// It follows the contract of [global.Store] exactly, with one difference in
// cost: every call is a map operation under one lock.
package memory

import (
	"context"
	"sync"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/origin"
)

// Store is a [global.Store] kept in memory. Cursors are the store's own
// change counter. The zero value is not usable; create one with [New].
type Store struct {
	mu      sync.Mutex
	version int64 // incremented by every change
	counts  map[origin.Cell]map[string]*countRow
	regions map[string]int64 // last announced, Unix ms
	denials map[origin.Cell]*denialRow
}

type countRow struct {
	count, expiresAt, version int64
}

type denialRow struct {
	global.Denial
	version int64
}

var _ global.Store = (*Store)(nil)

// New returns an empty Store.
func New() *Store {
	return &Store{
		counts:  make(map[origin.Cell]map[string]*countRow),
		regions: make(map[string]int64),
		denials: make(map[origin.Cell]*denialRow),
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
		rows := s.counts[c.Cell]
		if rows == nil {
			rows = make(map[string]*countRow)
			s.counts[c.Cell] = rows
		}
		r := rows[region]
		if r == nil {
			r = &countRow{}
			rows[region] = r
		}
		r.expiresAt = max(r.expiresAt, c.ExpiresAt)
		if c.Count > r.count {
			r.count = c.Count
			s.version++
			r.version = s.version
		}
	}
	return nil
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
// cell has a row active at now.
func (s *Store) pull(region string, cursor global.Cursor, now, activeFor int64) global.Pull {
	p := global.Pull{Next: global.Cursor(s.version)}
	for cell, rows := range s.counts {
		active := false
		for _, row := range rows {
			active = active || row.expiresAt > now
		}
		if !active {
			continue
		}
		for r, row := range rows {
			if row.version > int64(cursor) {
				p.Entries = append(p.Entries, global.Entry{Cell: cell, Region: r, Count: row.count})
			}
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
		s.denials[d.Cell] = &denialRow{Denial: d, version: s.version}
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

// readDenials is Denials with s.mu held.
func (s *Store) readDenials(region string, cursor global.Cursor, now int64) ([]global.Denial, global.Cursor) {
	var out []global.Denial
	for _, d := range s.denials {
		if d.version > int64(cursor) && d.ExpiresAt > now && d.Region != region {
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
	n := 0
	for cell, rows := range s.counts {
		for r, row := range rows {
			if row.expiresAt <= now {
				delete(rows, r)
				n++
			}
		}
		if len(rows) == 0 {
			delete(s.counts, cell)
		}
	}
	for cell, d := range s.denials {
		if d.ExpiresAt <= now {
			delete(s.denials, cell)
			n++
		}
	}
	return n, nil
}

// Close implements [global.Store]; a memory Store needs no release.
func (s *Store) Close() error { return nil }
