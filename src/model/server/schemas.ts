import { z } from "@hono/zod-openapi";
import { AGENT_STATES, AGENT_STATUSES, ERROR_OPS, LIFECYCLES, SERVER_STATUSES } from "../../domain/enums";
import { IMAGE_KINDS, type CatalogFields } from "../../domain/images";
import { MAX_AGENTS, MAX_ASSIGNMENT_ID_LENGTH, MAX_ASSIGNMENTS, MAX_REPORT_ERRORS } from "../../domain/limits";

const AGENT_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;

export const agentName = z
  .string()
  .regex(AGENT_NAME, "agent names are 1-63 chars of a-z, 0-9, '.', '_', '-', starting alphanumeric");
/** No control characters: an image or version an operator sets is printed in tables and terminals. */
// oxlint-disable-next-line no-control-regex -- finding control characters is the point
const PRINTABLE = /^[^\u0000-\u001f\u007f-\u009f]*$/;
export const printable = (what: string) => [PRINTABLE, `${what} must not contain control characters`] as const;
export const imageRef = z
  .string()
  .min(1)
  .max(512)
  .regex(...printable("an image"));
export const versionString = z
  .string()
  .min(1)
  .max(128)
  .regex(...printable("a version"));
/** What a host reports is its truth, whatever it holds: accepted as it is, and shown escaped. */
const reportedImage = z.string().min(1).max(512);
const reportedVersion = z.string().min(1).max(128);
const generation = z.number().int().min(1).max(Number.MAX_SAFE_INTEGER);
const lifecycle = z.enum(LIFECYCLES);

/** Rejects a list naming the same agent twice; the hook maps it to `duplicate_agent`. */
function uniqueNames<T extends { name: string }>(items: T[], ctx: z.RefinementCtx) {
  const seen = new Set<string>();
  items.forEach((item, i) => {
    if (seen.has(item.name)) {
      ctx.addIssue({
        code: "custom",
        path: [i, "name"],
        message: `agent '${item.name}' appears more than once`,
        params: { code: "duplicate_agent" },
      });
    }
    seen.add(item.name);
  });
}

/** An agent with its image by name and version, or (a catalog image) by id. */
const DesiredAgent = z
  .union([
    z.strictObject({
      name: agentName,
      image: imageRef,
      version: versionString,
      instance_id: z.uuid().optional(),
    }),
    z.strictObject({
      name: agentName,
      image_id: z.uuid().openapi({ description: "A catalog image, by id" }),
      instance_id: z.uuid().optional(),
    }),
  ])
  .openapi("DesiredAgentInput");

export const DesiredConfigRequest = z
  .strictObject({
    generation,
    agents: z.array(DesiredAgent).max(MAX_AGENTS).superRefine(uniqueNames),
    lifecycle: lifecycle.default("run"),
  })
  .openapi("DesiredConfigInput");
export type DesiredConfigRequest = z.infer<typeof DesiredConfigRequest>;

/** A desired config as its ledger takes it: every image resolved (src/images/resolve.ts). */
export interface DesiredConfigInput {
  generation: number;
  lifecycle: "run" | "terminate" | "uninstall";
  agents: ({ name: string; image: string; version: string; instance_id?: string } & Partial<CatalogFields>)[];
}

/** A catalog image as a desired config carries it (src/domain/images.ts, CatalogFields). */
const catalogFields = {
  image_id: z.string().optional().openapi({ description: "Catalog images: the image's id" }),
  kind: z.enum(IMAGE_KINDS).optional().openapi({ description: "Catalog images: how the image is installed" }),
  digest: z
    .string()
    .optional()
    .openapi({ description: "Catalog images: sha256 of the bytes (or the manifest, for oci-ref)" }),
  size: z.number().int().optional().openapi({ description: "Catalog images: bytes" }),
  source: z
    .union([z.object({ blob: z.string() }), z.object({ ref: z.string() })])
    .optional()
    .openapi({
      description:
        "Catalog images: where the host gets it: `blob`, a path fetched with its own server token; `ref`, a registry reference pinned by digest",
    }),
};

export const AgentSpec = z
  .object({ name: z.string(), image: z.string(), version: z.string(), instance_id: z.string(), ...catalogFields })
  .openapi("DesiredAgent");
export type AgentSpec = z.infer<typeof AgentSpec>;

export const DesiredConfig = z
  .object({
    server_id: z.string(),
    generation: z.number().int(),
    agents: z.array(AgentSpec),
    lifecycle,
  })
  .openapi("DesiredConfig");
export type DesiredConfig = z.infer<typeof DesiredConfig>;

export const agentState = z.enum(AGENT_STATES);
const errorOp = z.enum(ERROR_OPS);

const ReportedAgent = z
  .strictObject({
    name: agentName,
    image: reportedImage,
    version: reportedVersion,
    instance_id: z.string().min(1).max(128),
    state: agentState,
  })
  .openapi("ReportedAgent");

const ReportError = z
  .strictObject({ agent: agentName, op: errorOp, message: z.string().min(1).max(4096) })
  .openapi("ReportError");

const shortIds = z.array(z.string().min(1).max(MAX_ASSIGNMENT_ID_LENGTH)).max(MAX_ASSIGNMENTS);

export const InventoryReport = z
  .strictObject({
    generation: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
    reconciled_at: z.iso.datetime({ offset: true }),
    boot_id: z.string().min(1).max(128),
    agents: z.array(ReportedAgent).max(MAX_AGENTS).superRefine(uniqueNames),
    errors: z.array(ReportError).max(MAX_REPORT_ERRORS).default([]),
    assignments: z
      .strictObject({ units: shortIds.default([]), storage: shortIds.default([]) })
      .default({ units: [], storage: [] }),
  })
  .openapi("InventoryReport");
export type InventoryReport = z.infer<typeof InventoryReport>;

export const serverStatus = z.enum(SERVER_STATUSES);
export type { ServerStatus, AgentStatus } from "../../domain/enums";

export const agentStatus = z.enum(AGENT_STATUSES);

export const AgentStatusRow = z
  .object({
    name: z.string(),
    status: agentStatus,
    desired: z.object({ image: z.string(), version: z.string(), instance_id: z.string() }).nullable(),
    reported: z
      .object({ image: z.string(), version: z.string(), instance_id: z.string(), state: agentState })
      .nullable(),
    errors: z.array(z.object({ op: errorOp, message: z.string() })),
  })
  .openapi("AgentStatus");
export type AgentStatusRow = z.infer<typeof AgentStatusRow>;

/** What a report is answered with (PUT /v1/agent/inventory, and the channel's ack). */
export const ReportAccepted = z
  .object({
    server_id: z.string(),
    desired_generation: z.number().int(),
    status: serverStatus,
    agents: z.array(AgentStatusRow),
    report_tag: z.string().openapi({
      description:
        "Names this report's content. A host whose next reconcile finds nothing new sends it as X-Report-Tag on " +
        "GET /v1/agent/desired instead of reporting again: that poll counts as this report, received anew.",
      example: "r1x2y3z4a5b6c",
    }),
  })
  .openapi("ReportAccepted");
export type ReportAccepted = z.infer<typeof ReportAccepted>;

/** A desired config as the host is given it: while an operator's refresh is pending, it says so. */
export const HostDesiredConfig = DesiredConfig.extend({
  refresh: z
    .object({ requested_at: z.string() })
    .optional()
    .openapi({ description: "present while an operator's refresh is pending: report again now" }),
});

export const StoredReport = InventoryReport.extend({ received_at: z.number() });
export type StoredReport = z.infer<typeof StoredReport>;
