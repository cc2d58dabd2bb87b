package sluice

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
)

// The leader's side of the global layer. The node that holds its region's
// lease runs the region's rounds: it takes the counts and denials the
// region's nodes nominated, pulls the other regions' counts and denial rows
// from the store, imports them into the regional origin (where every node
// reads them with its hydrations, refreshes and replays), writes the
// region's counts and denials, announces the region and, once every
// CleanupEvery intervals of the clock, deletes expired rows (one node at a time, by the
// store's lock). The store's work so grows with regions, not with nodes.

// lead takes or renews the region's lease, storing with it the leader's
// cursors and the regions present, and records whether this node leads.
// A node that takes the lease after another held it starts from the
// cursors the lease carries, keeping what it took and knows it wrote (the
// region's counts only grow). A failed call ends its lead once the lease
// it last renewed would have lapsed: until then a round may still run on
// it, which at worst does some of the next leader's work again (every
// write and import only raises counts).
func (l *Limiter) lead(ctx context.Context, now int64, st *GlobalStats) {
	g := &l.global
	ttl := max(time.Duration(leaseIntervals*float64(g.cfg.Interval)), minLease)
	lease, err := g.region.Lead(ctx, origin.LeaseRequest{
		Holder:  g.holder,
		TTL:     ttl,
		Regions: g.regions,
		Cursors: origin.Cursors{Counts: int64(g.lead.cursor), Denials: int64(g.lead.denialCursor)},
	})
	if err != nil {
		if g.leading && now >= g.renewedAt+ttl.Milliseconds() {
			g.leading = false
			l.cfg.Logger.Warn("sluice: could not renew the region's lease; another node runs its global rounds", "err", err)
		}
		st.fail(err)
		return
	}
	switch {
	case lease.Held && g.lead.counts == nil:
		g.lead = newLeaderState(lease)
		l.cfg.Logger.Info("sluice: this node runs its region's global rounds", "region", l.cfg.Region, "fence", lease.Fence)
	case lease.Held && lease.Fence != g.lease.Fence:
		g.lead.cursor, g.lead.denialCursor = global.Cursor(lease.Cursors.Counts), global.Cursor(lease.Cursors.Denials)
		for _, c := range g.lead.imported {
			c.known = false // another holder may have imported since
		}
		l.cfg.Logger.Info("sluice: this node runs its region's global rounds again", "region", l.cfg.Region, "fence", lease.Fence)
	case !lease.Held && g.lead.counts != nil:
		l.handBack(ctx, st)
		g.lead = leaderState{} // what it kept as leader: the next term starts from the lease
	}
	if !lease.Held && lease.Regions > 0 {
		g.regions = lease.Regions
	}
	if lease.Held {
		g.renewedAt = now
	}
	g.lease, g.leading = lease, lease.Held
}

// handBack hands the counts and denials this node took as leader and has
// not written to the region's new leader, as nominations, when another node
// took the lease (or when it learns so after it failed to renew). Those it
// cannot hand back are lost (and the denials counted): a count is
// nominated again as it grows.
func (l *Limiter) handBack(ctx context.Context, st *GlobalStats) {
	g := &l.global
	ns := make([]origin.Nomination, 0, len(g.lead.counts)+len(g.lead.pendingDenials))
	for k, n := range g.lead.counts {
		ns = append(ns, origin.Nomination{Cell: k, Count: n})
	}
	for _, d := range g.lead.pendingDenials {
		ns = append(ns, origin.Nomination{Cell: d.Cell, Limit: d.Limit, Usage: d.Usage})
	}
	denials := len(g.lead.pendingDenials)
	clear(g.lead.counts)
	g.lead.pendingDenials = nil
	if len(ns) == 0 {
		return
	}
	if err := g.region.Nominate(ctx, ns); err != nil {
		st.DenialsLost += denials
		st.fail(err)
	}
}

// newLeaderState returns the state of a node that takes its region's lease
// for the first time: the cursors the lease carries, nothing taken.
func newLeaderState(lease origin.Lease) leaderState {
	return leaderState{
		cursor: global.Cursor(lease.Cursors.Counts), denialCursor: global.Cursor(lease.Cursors.Denials),
		counts: map[origin.Cell]int64{}, written: map[origin.Cell]int64{}, imported: map[origin.Cell]*importedCell{},
		regions: map[string]string{}, received: map[origin.Cell]struct{}{},
	}
}

// leadRound runs the region's round on its leader: it takes the nominations,
// pulls and imports the other regions' counts, writes the region's, reads
// and imports the other regions' denial rows (with the pull when the store
// implements global.PullerWithDenials and both mechanisms run: one read,
// not two), writes the region's denials, announces the region when due,
// and cleans up once every CleanupEvery intervals, on the clock's
// multiples of that period (see cleanupDue).
func (l *Limiter) leadRound(ctx context.Context, now int64, st *GlobalStats) {
	g := &l.global
	l.takeNominations(ctx, now, st)
	both, _ := g.cfg.Store.(global.PullerWithDenials)
	if g.cfg.DisableCounters || g.cfg.DisableDenials {
		both = nil // one read of the two is enough
	}
	var denials []global.Denial
	if !g.cfg.DisableCounters {
		denials = l.pull(ctx, both, now, st)
		l.writeCounts(ctx, now, st)
	}
	l.announce(ctx, now, st)
	if both == nil && !g.cfg.DisableDenials {
		denials = l.readDenials(ctx, now, st)
	}
	l.importDenials(ctx, now, denials, st)
	l.writeDenials(ctx, now, denials, st)
	g.lead.rounds++
	if cleanupDue(g.lead.lastRound, now, int64(g.cfg.CleanupEvery)*g.cfg.Interval.Milliseconds()) {
		n, err := g.cfg.Store.Cleanup(ctx, now, cleanupBatch)
		st.Cleaned = n
		st.fail(err)
	}
	g.lead.lastRound = now
}

// cleanupDue reports whether a leader's round at now, whose last round was
// at last (0 before its first), cleans up: whether a multiple of period
// (Unix ms) passed since last. The schedule is the clock's, not the
// leader's: a node that takes the lease keeps it, so leaders that change
// more often than period still clean up, and a takeover neither skips
// nor adds a cleanup unless the boundary falls before the new leader's
// first round.
func cleanupDue(last, now, period int64) bool {
	return last > 0 && period > 0 && now/period > last/period
}

// takeNominations takes the nominations waiting in the region's queue: the
// highest nominated count of each cell joins the counts to write, each
// denial the denials to write (with this region's name, and left out if
// another region's row for its cell was read).
func (l *Limiter) takeNominations(ctx context.Context, now int64, st *GlobalStats) {
	g := &l.global
	for range maxTakes {
		ns, err := g.region.Nominated(ctx, maxTake)
		if err != nil {
			st.fail(err)
			return
		}
		for _, n := range ns {
			switch {
			case expired(n.Cell, now):
			case n.Usage == 0:
				g.lead.counts[n.Cell] = max(g.lead.counts[n.Cell], n.Count)
			default:
				g.lead.pendingDenials = append(g.lead.pendingDenials, global.Denial{Cell: n.Cell, Limit: n.Limit,
					Usage: n.Usage, Region: l.cfg.Region, ExpiresAt: expiresAt(n.Cell)})
			}
		}
		if len(ns) < maxTake {
			return
		}
	}
}

// pull reads the other regions' counts of every cell changed since the
// last pull and imports them into the regional origin.
//
// With both set, the denial rows are read in the same call and returned,
// for the caller to import after it has written the region's counts, as it
// imports those readDenials reads.
func (l *Limiter) pull(ctx context.Context, both global.PullerWithDenials, now int64, st *GlobalStats) []global.Denial {
	g := &l.global
	activeFor := regionsActiveFor * g.cfg.Interval.Milliseconds()
	var p global.Pull
	var denials []global.Denial
	denialCursor := g.lead.denialCursor
	var err error
	if both != nil {
		p, denials, denialCursor, err = both.PullWithDenials(ctx, l.cfg.Region, g.lead.cursor, g.lead.denialCursor, now, activeFor)
	} else {
		p, err = g.cfg.Store.Pull(ctx, l.cfg.Region, g.lead.cursor, now, activeFor)
	}
	if err != nil {
		st.fail(err)
		return nil
	}
	if g.lead.rounds%forgetEvery == 0 {
		g.lead.forget(now)
	}
	imports := l.importsOf(p.Entries, now)
	if local, ok := g.region.(*localRegion); ok {
		local.floor(p.Entries, now)
	}
	stored, err := l.importInto(ctx, imports)
	if err != nil {
		g.lead.unknown(imports)
		st.fail(err)
		return denials // the cursor stays: the next pull reads them again
	}
	g.lead.remember(imports, stored, now)
	if _, local := g.region.(*localRegion); !local {
		l.raiseHeldImported(imports)
	}
	g.lead.cursor, g.lead.denialCursor, g.regions = p.Next, denialCursor, max(p.Regions, 1)
	st.Pulled = len(p.Entries)
	return denials
}

// importInto imports imports into the regional origin. Through an
// origin.StoredImporter, it imports as this node's lease holder, those of
// the cells the leader knows as known imports (see leaderState.asKnown),
// and returns what the origin stores of the others; else Stored is nil.
func (l *Limiter) importInto(ctx context.Context, imports []origin.Import) ([]origin.Stored, error) {
	g := &l.global
	si, ok := g.region.(origin.StoredImporter)
	if !ok {
		return nil, g.region.Import(ctx, imports)
	}
	g.lead.asKnown(imports)
	return si.ImportStored(ctx, g.holder, imports)
}

// importMemory is how long a leader remembers an entry it imported and has
// not read since, and forgetEvery how many rounds apart it forgets them: a
// pull reads a row again only within the store's overlap (global/mysql:
// five seconds, ten at a whole pull), and an entry read after it was
// forgotten is imported once more, which changes nothing.
const (
	importMemory = 30_000 // ms
	forgetEvery  = 16
)

// forget deletes the cells of imported that expired or whose entries no
// pull read for importMemory; regions keeps the names of the regions of
// the entries left.
func (s *leaderState) forget(now int64) {
	regions := map[string]string{}
	for k, c := range s.imported {
		if expired(k, now) || now-c.seen > importMemory {
			delete(s.imported, k)
			s.entries -= len(c.entries)
			continue
		}
		for _, e := range c.entries {
			regions[e.region] = e.region
		}
	}
	s.regions = regions
}

// heapBytes estimates the memory of what the leader keeps between its
// rounds that grows with the cells it handles: its record of the entries
// it imported and of the counts it took and wrote.
func (s *leaderState) heapBytes() int64 {
	return int64(len(s.imported))*importedCellHeapBytes + int64(s.entries)*importedEntryHeapBytes +
		int64(len(s.written)+len(s.counts))*countHeapBytes
}

// remember records the entries of imports, imported at now, and what
// stored (nil, or one per import) says the origin holds of their cells:
// each cell's entries in one importedCell, each region's name held once.
// A cell whose stored entries the leader now holds every one of (their sum
// is the stored sum) becomes known; a known import keeps its cell known;
// any other import leaves it unknown.
func (s *leaderState) remember(imports []origin.Import, stored []origin.Stored, now int64) {
	for i, im := range imports {
		c := s.imported[im.Cell]
		if c == nil {
			c = &importedCell{entries: make([]importedEntry, 0, len(im.Counts))}
			s.imported[im.Cell] = c
		}
		c.seen = now
		s.raise(c, im.Counts)
		switch {
		case im.Known:
			c.imported = im.Imported
		case stored != nil && stored[i].Read:
			s.raise(c, stored[i].Counts)
			c.imported, c.known = stored[i].Imported, stored[i].Sum == c.sum()
		default:
			c.known = false
		}
	}
}

// raise raises c's entries to counts, holding each region's name once.
func (s *leaderState) raise(c *importedCell, counts []origin.RegionCount) {
	for _, rc := range counts {
		name, ok := s.regions[rc.Region]
		if !ok {
			name = strings.Clone(rc.Region)
			s.regions[name] = name
		}
		if c.raise(name, rc.Count) {
			s.entries++
		}
	}
}

// asKnown turns each import of imports whose cell the leader knows into a
// known import (origin.Import.Known): every region's entry of the cell the
// origin will store after it (the leader's, raised to the import's), and
// the imported count, the higher of the cell's and their sum. An import
// of a denial's usage stays as it is.
func (s *leaderState) asKnown(imports []origin.Import) {
	for i := range imports {
		im := &imports[i]
		c := s.imported[im.Cell]
		if c == nil || !c.known || im.Usage != 0 {
			continue
		}
		all := make([]origin.RegionCount, 0, len(c.entries)+len(im.Counts))
		for _, e := range c.entries {
			all = append(all, origin.RegionCount{Region: e.region, Count: e.count})
		}
		var sum int64
		for _, rc := range im.Counts {
			j := slices.IndexFunc(all, func(x origin.RegionCount) bool { return x.Region == rc.Region })
			if j < 0 {
				all = append(all, rc)
			} else {
				all[j].Count = max(all[j].Count, rc.Count)
			}
		}
		for _, rc := range all {
			sum = window.Add(sum, rc.Count)
		}
		im.Counts, im.Known, im.Imported = all, true, max(c.imported, sum)
	}
}

// unknown forgets that the leader knows the cells of imports: an import
// that failed may have written some of them, and a denial's import raises
// their imported count by what the origin computes.
func (s *leaderState) unknown(imports []origin.Import) {
	for _, im := range imports {
		if c := s.imported[im.Cell]; c != nil {
			c.known = false
		}
	}
}

// raiseHeldImported raises the imported count of each cell of imports that
// this node holds to the sum of the other regions' entries its leader has
// imported of the cell: the leader's own counters see the other regions'
// counts as soon as it imports them, not at their next replay or refresh.
// The sum holds only counts the other regions published and the leader
// imported, so the node never counts more than they spent; the origin's
// imported count, which nodes read, also holds them (and a denial's
// usage). Cells the node does not hold are not created.
func (l *Limiter) raiseHeldImported(imports []origin.Import) {
	for _, im := range imports {
		c := l.cells.load(l.cells.keyHash(&im.Cell.Key), &im.Cell)
		if c == nil {
			continue
		}
		c.raiseImported(l.global.lead.imported[im.Cell].sum())
		l.changed(c)
	}
}

// importsOf returns the imports of the other regions' entries among
// entries that rose above those imported, one import per cell; and notes
// the region's own entries as written (never write again what is stored).
func (l *Limiter) importsOf(entries []global.Entry, now int64) []origin.Import {
	g := &l.global
	var imports []origin.Import
	at := make(map[origin.Cell]int)
	for _, e := range entries {
		switch {
		case e.Region == l.cfg.Region:
			if e.Count > 0 {
				g.lead.written[e.Cell] = max(g.lead.written[e.Cell], e.Count)
			}
			continue
		case expired(e.Cell, now):
			continue
		}
		if c := g.lead.imported[e.Cell]; c != nil && e.Count <= c.count(e.Region) {
			c.seen = now
			continue
		}
		i, ok := at[e.Cell]
		if !ok {
			i, at[e.Cell] = len(imports), len(imports)
			imports = append(imports, origin.Import{Cell: e.Cell})
		}
		imports[i].Counts = append(imports[i].Counts, origin.RegionCount{Region: e.Region, Count: e.Count})
	}
	return imports
}

// writeCounts writes the nominated counts above those written already; a
// failed write keeps them for the next round.
func (l *Limiter) writeCounts(ctx context.Context, now int64, st *GlobalStats) {
	g := &l.global
	for k := range g.lead.written {
		if expired(k, now) {
			delete(g.lead.written, k)
		}
	}
	var counts []global.Count
	for k, n := range g.lead.counts {
		if expired(k, now) || n <= g.lead.written[k] {
			delete(g.lead.counts, k)
			continue
		}
		counts = append(counts, global.Count{Cell: k, Count: n, ExpiresAt: expiresAt(k)})
	}
	if len(counts) == 0 {
		return
	}
	if err := g.cfg.Store.Publish(ctx, l.cfg.Region, counts, now); err != nil {
		st.fail(err)
		return
	}
	for _, c := range counts {
		g.lead.written[c.Cell] = c.Count
		delete(g.lead.counts, c.Cell)
	}
	st.Published += len(counts)
}

// announce announces the region to the store when it has not for
// announceEvery intervals, publishing or not: the other regions count a
// region present for regionsActiveFor intervals after it last announced
// itself, so a live region never lapses, and its leader pays one statement
// every third round for it, not one a round.
func (l *Limiter) announce(ctx context.Context, now int64, st *GlobalStats) {
	g := &l.global
	if now < g.lead.announceAt {
		return
	}
	if err := g.cfg.Store.Announce(ctx, l.cfg.Region, now); err != nil {
		st.fail(err)
		return
	}
	g.lead.announceAt = now + announceEvery*g.cfg.Interval.Milliseconds()
}

// readDenials reads the denial rows other regions wrote since the last
// read, for a store that does not read them with the pull.
func (l *Limiter) readDenials(ctx context.Context, now int64, st *GlobalStats) []global.Denial {
	g := &l.global
	ds, next, err := g.cfg.Store.Denials(ctx, l.cfg.Region, g.lead.denialCursor, now)
	if err != nil {
		st.fail(err)
		return nil
	}
	g.lead.denialCursor = next
	return ds
}

// importDenials imports the denial rows other regions wrote into the
// regional origin: each cell's imported count rises until its usage
// reaches the row's (the originator's usage, or its limit for a row
// without one), so every node of the region denies what the originator
// denied, and after the rollover weighs it as the previous cell. What the
// row's usage holds of this region's own count is not imported twice: the
// origin raises the cell's usage to it, not by it (origin.Import).
//
// Rows of this region are never imported, even from a store that returns
// them: the usage they carry is this region's own count.
func (l *Limiter) importDenials(ctx context.Context, now int64, ds []global.Denial, st *GlobalStats) {
	g := &l.global
	for k := range g.lead.received {
		if expired(k, now) {
			delete(g.lead.received, k)
		}
	}
	var imports []origin.Import
	for _, d := range ds {
		if d.Region == l.cfg.Region {
			continue
		}
		usage := d.Usage
		if usage <= 0 {
			usage = d.Limit
		}
		imports = append(imports, origin.Import{Cell: d.Cell, Usage: usage})
		g.lead.received[d.Cell] = struct{}{}
	}
	if len(imports) == 0 {
		return
	}
	err := g.region.Import(ctx, imports)
	g.lead.unknown(imports)
	if err != nil {
		st.fail(err)
		return
	}
	st.DenialsSynced += len(imports)
}

// writeDenials writes the denials taken, in batches of DenialBatch,
// leaving out the cells of another region's rows (read, the round's read
// included): the store keeps the first row of a cell, so a row of this
// region's after another region's would change nothing and only cost a
// write. (Regions often deny a counter within one round of each other.) A
// batch the store refuses is dropped, not retried: a denial is worth
// something only while its window lasts, and the originating region
// enforces it anyway.
func (l *Limiter) writeDenials(ctx context.Context, now int64, read []global.Denial, st *GlobalStats) {
	g := &l.global
	for _, d := range read {
		if d.Region != l.cfg.Region {
			g.lead.received[d.Cell] = struct{}{}
		}
	}
	pending := slices.DeleteFunc(g.lead.pendingDenials, func(d global.Denial) bool {
		_, ok := g.lead.received[d.Cell]
		if ok {
			st.DenialsLeft++
		}
		return ok || d.ExpiresAt <= now
	})
	g.lead.pendingDenials = nil
	for len(pending) > 0 {
		batch := pending[:min(len(pending), g.cfg.DenialBatch)]
		pending = pending[len(batch):]
		if err := g.cfg.Store.EmitDenials(ctx, batch); err != nil {
			st.DenialsLost += len(batch)
			st.fail(err)
			continue
		}
		st.DenialsSent += len(batch)
	}
}

// importedCellHeapBytes and importedEntryHeapBytes are what a leader's
// record of its imports takes in memory, per cell (its map entry, its
// importedCell and its identity's strings, about 15 bytes long) and per
// region's entry of it; countHeapBytes is what a cell of its counts taken
// or written takes. TestLeaderHeapBytes measures them.
const (
	importedCellHeapBytes  = 146
	importedEntryHeapBytes = 45
	countHeapBytes         = 120
)
