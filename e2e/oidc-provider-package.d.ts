/** The little of oidc-provider's API the OpenID test uses (the package ships no types). */
declare module "oidc-provider" {
  import type { Server } from "node:http";
  interface Account {
    accountId: string;
    claims: () => Promise<Record<string, unknown>>;
  }
  export default class Provider {
    constructor(
      issuer: string,
      configuration: Record<string, unknown> & { findAccount: (ctx: unknown, id: string) => Promise<Account> },
    );
    listen(port: number): Server;
  }
}
