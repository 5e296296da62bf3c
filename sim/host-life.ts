// One host's life in a run: the reference agent with an in-memory driver, booted after its place
// in the ramp, until the host goes silent, reboots through FleetLock (and boots again), or the
// run ends.
import { HostAgent } from "../agent/agent.ts";
import { FleetLockClient } from "../agent/fleetlock.ts";
import { sleep, type FetchLike } from "../agent/http.ts";
import { MemoryDriver } from "../agent/memory-driver.ts";
import type { SimHost } from "./model.ts";
import type { SimOptions } from "./options.ts";
import { logNormal, rng } from "./random.ts";
import type { Tally } from "./tally.ts";

export interface RunContext {
  o: SimOptions;
  fetchImpl: FetchLike;
  /** The run's seeded generator, shared by every host (so a seed replays a run). */
  random: () => number;
  runTag: string;
  /** The fleet's FleetLock base URL; null when no host reboots. */
  baseUrl: string | null;
  tally: Tally;
  /** Aborted when the run ends. */
  stopAll: AbortController;
  elapsed: () => number;
  durationMs: number;
}

/** A function that plays one host's life; its drivers outlive a reboot. */
export function hostLives(run: RunContext) {
  const { o, random, stopAll, tally } = run;
  const drivers = new Map<string, MemoryDriver>();
  const failingAgent = `sim-a${Math.min(1, o.agents - 1)}`;

  /** One boot of a host: the agent loop until the host goes silent, reboots, or the run ends. */
  const boot = (h: SimHost, stop: AbortSignal) => {
    const bootId = `${h.fleetlockId}-boot-${h.bootIds.length}-${run.runTag}`;
    h.bootIds.push(bootId);
    let driver = drivers.get(h.id);
    if (!driver) {
      const hostRandom = rng(o.seed * 7919 + h.index);
      driver = new MemoryDriver({
        failInstall: (name) => h.flags.failInstall && name === failingAgent,
        failRemove: () => h.flags.failRemove,
        latencyMs: () => logNormal(hostRandom, h.flags.slow ? o.slowLatencyMs : o.latencyMs),
      });
      drivers.set(h.id, driver);
    }
    const agent = new HostAgent({
      url: o.url,
      token: h.token,
      driver,
      bootId,
      transport: o.transport,
      waitS: o.waitS,
      reportIntervalMs: o.heartbeatS * 1000,
      fetch: run.fetchImpl,
      onEvent: tally.onEvent(h, bootId),
    });
    // A boot that ends (a reboot, silence) takes its channel with it.
    return agent.run(stop).finally(() => (h.channelOpen = false));
  };

  return async (h: SimHost) => {
    // Hosts come up spread over the ramp, not as one synchronized wave.
    await sleep(random() * Math.min(o.rampS * 1000, run.durationMs / 2), stopAll.signal).catch(() => {});
    if (stopAll.signal.aborted) return;
    let current = new AbortController();
    const link = () => current.abort();
    stopAll.signal.addEventListener("abort", link);
    let running = boot(h, current.signal);

    if (h.flags.silentAtMs !== null) {
      await sleep(Math.max(0, h.flags.silentAtMs - run.elapsed()), stopAll.signal).catch(() => {});
      if (!stopAll.signal.aborted) {
        h.silent = true;
        current.abort();
      }
    } else if (h.flags.rebootAtMs !== null && run.baseUrl) {
      await sleep(Math.max(0, h.flags.rebootAtMs - run.elapsed()), stopAll.signal).catch(() => {});
      const fl = new FleetLockClient(run.baseUrl, { id: h.fleetlockId, group: o.group }, run.fetchImpl);
      while (!stopAll.signal.aborted) {
        try {
          tally.ops.fleetlock++;
          const r = await fl.preReboot(stopAll.signal);
          if (r.ok) {
            h.reboot.grantedAt = run.elapsed();
            break;
          }
          h.reboot.refusals++;
        } catch {
          tally.ops.errors++;
        }
        // Zincati retries every few minutes; the simulator is in more of a hurry.
        await sleep(300 + random() * 400, stopAll.signal).catch(() => {});
      }
      if (h.reboot.grantedAt !== null && !stopAll.signal.aborted) {
        tally.reboots++;
        current.abort();
        h.exit = (await running).reason;
        await sleep(200 + random() * 600, stopAll.signal).catch(() => {});
        if (!stopAll.signal.aborted) {
          // Back up: Zincati says steady-state at boot, unless that call is lost.
          if (h.flags.lostSteady) {
            h.reboot.steadyState = "lost";
            tally.lost++;
          } else {
            try {
              tally.ops.fleetlock++;
              await fl.steadyState(stopAll.signal);
              h.reboot.steadyState = "sent";
            } catch {
              tally.ops.errors++;
            }
          }
          current = new AbortController();
          if (stopAll.signal.aborted) current.abort();
          h.reboot.backAt = run.elapsed();
          running = boot(h, current.signal);
        }
      }
    }
    h.exit = (await running).reason;
    stopAll.signal.removeEventListener("abort", link);
  };
}
