/** The machine's drivers by kind (replaced by the podman and tarball drivers of agent/drivers/ once they land). */
import type { DriverFactory } from "./run.ts";

export const makeDrivers: DriverFactory = () => ({
  container: { driver: null, why: "this build has no container driver" },
  tarball: { driver: null, why: "this build has no tarball driver" },
});
