import type { RequestIdVariables } from "hono/request-id";
import type { Env } from "../env";
import type { Principal } from "../auth/principal";

export type AppEnv = { Bindings: Env; Variables: { principal: Principal } & RequestIdVariables };
