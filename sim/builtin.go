package sim

import (
	"slices"
	"time"
)

// The shapes shared by the built-in scenarios: one region decides on a
// 10 s window, several regions on a 1 m window (denial propagation needs a
// window of at least a minute) with a global round every second.
const (
	regionWindow = 10 * time.Second
	globalWindow = time.Minute
	globalEvery  = time.Second
)

// Builtin returns the built-in scenarios, in the order of the accuracy
// report. Each call returns fresh values.
func Builtin() []Scenario {
	return slices.Concat(regionScenarios(), regionVariants(), regionsScenarios(), faultScenarios(), clusterScenarios())
}

// inRegion returns a scenario of one region of nodes nodes at load times
// the limit of 100 per 10 s, for 10 identifiers over 6 windows.
func inRegion(name, desc string, nodes int, load float64, band Band, faults ...Fault) Scenario {
	return Scenario{
		Name: name, Description: desc, Regions: 1, Nodes: nodes, Limit: 100,
		Window: regionWindow, Windows: 6, Load: load, Identifiers: 10, Faults: faults, Band: band,
	}
}

// inRegions returns a scenario of several regions of nodes nodes each,
// their traffic shaped as traffic says, at load times the limit of 100 per
// minute, for 8 identifiers over 5 windows, with a global round every
// second.
func inRegions(name, desc string, regions, nodes int, load float64, traffic Traffic, band Band, faults ...Fault) Scenario {
	return Scenario{
		Name: name, Description: desc, Regions: regions, Nodes: nodes, Limit: 100,
		Window: globalWindow, Windows: 5, Load: load, Identifiers: 8, Traffic: traffic,
		GlobalInterval: globalEvery, Faults: faults, Band: band,
	}
}

// regionScenarios returns the scenarios of one region with the default
// settings, from one node at 2x the limit to three at 10x.
func regionScenarios() []Scenario {
	return []Scenario{
		inRegion("one-node",
			"One node on its origin at 2x the limit: the engine must make exactly the model's decisions.",
			1, 2, Band{MinOverPct: 0, MaxOverPct: 0}),
		inRegion("region-1x",
			"Three nodes of one region behind a random load balancer, at 1x the limit.",
			3, 1, Band{MinOverPct: 0, MaxOverPct: 1}),
		inRegion("region-2x",
			"Three nodes of one region behind a random load balancer, at 2x the limit.",
			3, 2, Band{MinOverPct: 0, MaxOverPct: 1}),
		inRegion("region-10x",
			"Three nodes of one region behind a random load balancer, at 10x the limit.",
			3, 10, Band{MinOverPct: 0, MaxOverPct: 1}),
	}
}

// regionVariants returns region-10x with one setting changed or one
// imperfection of the network added: what each costs in accuracy.
func regionVariants() []Scenario {
	noMargin := inRegion("region-10x-no-margin",
		"As region-10x with OriginMargin off: only strict mode, after a first denial, asks the origin; the first window leaks what the nodes admit on stale local views.",
		3, 10, Band{MinOverPct: 0.1, MaxOverPct: 3})
	noMargin.OriginMargin = -1
	replay1s := inRegion("region-10x-replay-1s",
		"As region-10x with a replay every second instead of every 25 ms: a node's view lags its region by up to a second of the others' admissions, more than the margin of 20 units covers.",
		3, 10, Band{MinOverPct: 3, MaxOverPct: 15})
	replay1s.ReplayInterval = time.Second
	replayLatency := inRegion("region-10x-replay-latency",
		"As region-10x with replays that take 200 ms to land at the origin (a slow or distant Redis): the origin decides near the limit without the other nodes' replays in flight.",
		3, 10, Band{MinOverPct: 0.5, MaxOverPct: 8})
	replayLatency.ReplayLatency = 200 * time.Millisecond
	originLoss := inRegion("origin-loss",
		"As region-10x on a lossy network: 20% of the calls to the regional origin fail at random (a failed origin decision backs the counter off to local decisions for a second).",
		3, 10, Band{MinOverPct: 0.3, MaxOverPct: 5})
	originLoss.OriginLoss = 0.2
	return []Scenario{noMargin, replay1s, replayLatency, originLoss}
}

// regionsScenarios returns the scenarios of several regions: traffic on
// one region or spread over them, a replication lag, a lossy network.
func regionsScenarios() []Scenario {
	globalLatency := inRegions("two-regions-global-latency",
		"As two-regions-10x with writes to the global store taking 2 s (two rounds) to show in the other region, like a replication lag: each region goes on admitting for two more rounds on what it saw of the other.",
		2, 2, 10, TrafficEven, Band{MinOverPct: 2, MaxOverPct: 15})
	globalLatency.GlobalLatency = 2 * time.Second
	globalLoss := inRegions("global-loss",
		"As spread-3-regions with 30% of the calls to the global store failing at random: rounds fail, the next one catches up.",
		3, 1, 1.5, TrafficEven, Band{MinOverPct: 0, MaxOverPct: 6})
	globalLoss.GlobalLoss = 0.3
	return []Scenario{
		inRegions("burst-one-region",
			"Three regions of two nodes; all traffic, at 10x the limit, hits the first region.",
			3, 2, 10, TrafficOneRegion, Band{MinOverPct: 0, MaxOverPct: 1}),
		inRegions("two-regions-10x",
			"Two regions of two nodes, traffic at 10x the limit spread evenly: what each region admits between a publication and the other's next pull goes unseen, mostly in an identifier's first window.",
			2, 2, 10, TrafficEven, Band{MinOverPct: 0.5, MaxOverPct: 10}),
		globalLatency,
		inRegions("spread-3-regions",
			"Traffic at 1.5x the limit spread evenly over three regions of one node each.",
			3, 1, 1.5, TrafficEven, Band{MinOverPct: 0, MaxOverPct: 5}),
		inRegions("spread-8-regions",
			"Traffic at 1.5x the limit spread evenly over eight regions of one node each: each region stays under 20% of the limit (the free zone of a fixed publication floor).",
			8, 1, 1.5, TrafficEven, Band{MinOverPct: 0, MaxOverPct: 5}),
		globalLoss,
	}
}

// faultScenarios returns the scenarios with a scheduled fault: the
// regional origin down, the global store down, a node restarting.
func faultScenarios() []Scenario {
	return []Scenario{
		inRegion("origin-outage",
			"Three nodes of one region at 2x the limit; the regional origin (Redis) is down from the middle of the third window to the middle of the fourth.",
			3, 2, Band{MinOverPct: 3, MaxOverPct: 20},
			Fault{Kind: OriginOutage, At: 25 * time.Second, Until: 35 * time.Second}),
		inRegions("global-outage",
			"Three regions of one node at 2x the limit spread evenly; the global store (MySQL) is down for the second and third windows.",
			3, 1, 2, TrafficEven, Band{MinOverPct: 15, MaxOverPct: 60},
			Fault{Kind: GlobalOutage, At: globalWindow, Until: 3 * globalWindow}),
		inRegion("node-restart",
			"Three nodes of one region at 2x the limit; one node restarts in the middle of the third window.",
			3, 2, Band{MinOverPct: 0, MaxOverPct: 1},
			Fault{Kind: Restart, At: 25 * time.Second, Node: 0}),
	}
}

// clusterScenarios returns the scenarios of one region in cluster mode:
// under load, and losing a node with the counts it owned.
func clusterScenarios() []Scenario {
	load := inRegion("cluster-10x",
		"Three nodes of one region in cluster mode (no shared store: each identity's count lives on its owner node) behind a random load balancer, at 10x the limit.",
		3, 10, Band{MinOverPct: 0, MaxOverPct: 1})
	nodeLoss := inRegion("cluster-node-loss",
		"Three nodes in cluster mode at 2x the limit; node 0 dies in the middle of the third window with the counts it owned. The others' breakers open on it and its runner-up stands in, seeded with what they saw; 5 s later the ring drops it; a fresh node 0 joins at the start of the fifth window and takes its identities back.",
		3, 2, Band{MinOverPct: 0, MaxOverPct: 2},
		Fault{Kind: NodeLoss, At: 25 * time.Second, Until: 40 * time.Second, Node: 0})
	load.Origin = OriginCluster
	nodeLoss.Origin = OriginCluster
	return []Scenario{load, nodeLoss}
}

// Deployments returns the built-in scenarios of whole deployments, run for what
// they cost (docs/capacity.md) rather than for the accuracy report:
// they are not part of Builtin, and take minutes each. Each call returns
// fresh values.
func Deployments() []Scenario {
	return []Scenario{scale1M()}
}

// scale1M returns scale-1m at its full size: a million active identities
// (Zipf 1.1), 10 regions of 20 nodes, a million requests per second in
// all, each identity allowed 60 requests a minute, a global round every
// second, over one window: 60 million requests.
func scale1M() Scenario {
	return Scenario{
		Name: "scale-1m",
		Description: "A million active identities (Zipf 1.1) over 10 regions of 20 nodes, a million requests per second, " +
			"60 a minute allowed to each, a global round every second, at full size: one minute, 60 million requests " +
			"(about 8 minutes and 12 GB on two cores). The band is the over-admission target, 5%.",
		Regions: 10, Nodes: 20, Limit: 60, Window: globalWindow, Windows: 1, Load: 1,
		Identifiers: 1_000_000, Skew: 1.1, GlobalInterval: globalEvery,
		Band: Band{MinOverPct: 0, MaxOverPct: 5},
	}
}

// Find returns the built-in scenario called name: one of Builtin, of
// Deployments or of the scale study (ScaleStudy).
func Find(name string) (Scenario, bool) {
	all := slices.Concat(Builtin(), Deployments())
	for _, sr := range ScaleStudy() {
		all = append(all, sr.Scenarios...)
	}
	i := slices.IndexFunc(all, func(s Scenario) bool { return s.Name == name })
	if i < 0 {
		return Scenario{}, false
	}
	return all[i], true
}
