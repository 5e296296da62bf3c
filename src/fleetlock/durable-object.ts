import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env";

/** One per fleet: a counting semaphore per reboot group (FleetLock). */
export class RebootCoordinator extends DurableObject<Env> {}
