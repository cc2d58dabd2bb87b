// Calls a running Sluice server through the published Unkey SDKs, exactly
// as an Unkey user would, with only the base URL changed.
//
//   SLUICE_URL=http://127.0.0.1:7070 SLUICE_KEY=<root key> node check.mjs
//
// Exits 0 when every call succeeds and every answer is right; otherwise
// prints what failed and exits 1.
import { Unkey } from "@unkey/api";
import * as errors from "@unkey/api/models/errors";
import { Ratelimit, Overrides } from "@unkey/ratelimit";

const serverURL = process.env.SLUICE_URL;
const rootKey = process.env.SLUICE_KEY;
if (!serverURL || !rootKey) {
  console.error("set SLUICE_URL and SLUICE_KEY");
  process.exit(2);
}

const unkey = new Unkey({ serverURL, rootKey });
const ns = `node-${Date.now()}`;
let failures = 0;

function check(name, ok, detail) {
  if (ok) {
    console.log(`ok   ${name}`);
  } else {
    failures++;
    console.error(`FAIL ${name}: ${JSON.stringify(detail)}`);
  }
}

async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    failures++;
    console.error(`FAIL ${name}: ${e?.name}: ${e?.message}`);
  }
}

await step("limit", async () => {
  const first = await unkey.ratelimit.limit({ namespace: ns, identifier: "u1", limit: 2, duration: 86400000 });
  check("limit passes", first.data.success === true && first.data.remaining === 1 && first.data.limit === 2, first);
  check("meta.requestId", typeof first.meta.requestId === "string" && first.meta.requestId.length > 0, first.meta);
  check("reset is the end of the day cell", first.data.reset % 86400000 === 0 && first.data.reset > Date.now(), first.data);
  await unkey.ratelimit.limit({ namespace: ns, identifier: "u1", limit: 2, duration: 86400000 });
  const third = await unkey.ratelimit.limit({ namespace: ns, identifier: "u1", limit: 2, duration: 86400000 });
  check("limit denies with success=false", third.data.success === false && third.data.remaining === 0, third.data);
});

await step("cost", async () => {
  const r = await unkey.ratelimit.limit({ namespace: ns, identifier: "u2", limit: 10, duration: 86400000, cost: 4 });
  check("cost 4 of 10", r.data.success && r.data.remaining === 6, r.data);
  const peek = await unkey.ratelimit.limit({ namespace: ns, identifier: "u2", limit: 10, duration: 86400000, cost: 0 });
  check("cost 0 peeks", peek.data.success && peek.data.remaining === 6, peek.data);
});

await step("overrides", async () => {
  const set = await unkey.ratelimit.setOverride({ namespace: ns, identifier: "vip_*", limit: 100, duration: 3600000 });
  check("setOverride returns an id", typeof set.data.overrideId === "string" && set.data.overrideId.length > 0, set.data);
  const got = await unkey.ratelimit.getOverride({ namespace: ns, identifier: "vip_*" });
  check("getOverride", got.data.overrideId === set.data.overrideId && got.data.limit === 100 && got.data.duration === 3600000, got.data);
  const lim = await unkey.ratelimit.limit({ namespace: ns, identifier: "vip_1", limit: 1, duration: 86400000 });
  check("override applies", lim.data.overrideId === set.data.overrideId && lim.data.limit === 100 && lim.data.reset % 3600000 === 0, lim.data);
  for (let i = 0; i < 3; i++) {
    await unkey.ratelimit.setOverride({ namespace: ns, identifier: `exact_${i}`, limit: i, duration: 86400000 });
  }
  const seen = [];
  const pages = await unkey.ratelimit.listOverrides({ namespace: ns, limit: 2 });
  for await (const page of pages) {
    for (const o of page.result.data) seen.push(o.identifier);
  }
  check("listOverrides paginates", JSON.stringify(seen) === JSON.stringify(["exact_0", "exact_1", "exact_2", "vip_*"]), seen);
  const del = await unkey.ratelimit.deleteOverride({ namespace: ns, identifier: "vip_*" });
  check("deleteOverride", del.data !== undefined, del);
  try {
    await unkey.ratelimit.getOverride({ namespace: ns, identifier: "vip_*" });
    check("getOverride after delete is 404", false, "no error");
  } catch (e) {
    check("getOverride after delete is NotFoundErrorResponse", e instanceof errors.NotFoundErrorResponse, e?.name);
  }
});

await step("multiLimit", async () => {
  const r = await unkey.ratelimit.multiLimit([
    { namespace: ns, identifier: "m1", limit: 5, duration: 86400000 },
    { namespace: ns, identifier: "m2", limit: 5, duration: 86400000, cost: 5 },
  ]);
  check("multiLimit passes", r.data.passed === true && r.data.limits.length === 2 && r.data.limits[1].remaining === 0, r.data);
  const r2 = await unkey.ratelimit.multiLimit([
    { namespace: ns, identifier: "m1", limit: 5, duration: 86400000 },
    { namespace: ns, identifier: "m2", limit: 5, duration: 86400000 },
  ]);
  check("multiLimit all-or-nothing", r2.data.passed === false && r2.data.limits[0].passed === true && r2.data.limits[1].passed === false, r2.data);
  const peek = await unkey.ratelimit.limit({ namespace: ns, identifier: "m1", limit: 5, duration: 86400000, cost: 0 });
  check("failed batch counted nothing", peek.data.remaining === 4, peek.data);
});

await step("errors parse as the SDK's error classes", async () => {
  try {
    await unkey.ratelimit.limit({ namespace: ns, identifier: "u", limit: 1, duration: 10 });
    check("400", false, "no error");
  } catch (e) {
    check("400 is BadRequestErrorResponse with errors", e instanceof errors.BadRequestErrorResponse && e.error.errors.length > 0, e?.name);
  }
  try {
    await new Unkey({ serverURL, rootKey: "wrong-key" }).ratelimit.limit({ namespace: ns, identifier: "u", limit: 1, duration: 86400000 });
    check("401", false, "no error");
  } catch (e) {
    check("401 is UnauthorizedErrorResponse", e instanceof errors.UnauthorizedErrorResponse, e?.name);
  }
});

await step("@unkey/ratelimit", async () => {
  const rl = new Ratelimit({ baseUrl: serverURL, rootKey, namespace: ns, limit: 2, duration: "1d", timeout: false });
  const a = await rl.limit("rl-user");
  const b = await rl.limit("rl-user", { cost: 1 });
  const c = await rl.limit("rl-user");
  check("Ratelimit.limit", a.success && b.success && !c.success && a.remaining === 1, { a, b, c });
  const ov = new Overrides({ baseUrl: serverURL, rootKey });
  const set = await ov.setOverride({ namespace: ns, identifier: "rl-vip", limit: 9, duration: 86400000 });
  const d = await rl.limit("rl-vip");
  check("Overrides + Ratelimit", d.success && d.limit === 9 && d.overrideId === set.data.overrideId, d);
});

if (failures > 0) {
  console.error(`${failures} failure(s)`);
  process.exit(1);
}
console.log("all SDK checks passed");
