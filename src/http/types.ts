import type { RequestIdVariables } from "hono/request-id";
import type { Principal } from "../domain/principal";
import type { Env } from "../env";

export type AppEnv = { Bindings: Env; Variables: { principal: Principal } & RequestIdVariables };
