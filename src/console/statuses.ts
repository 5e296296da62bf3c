import type { ErrorCode } from "../domain/errors";
import { STATUS_OF_CODE } from "../http/errors";

/** The statuses a console page answers with, each with the title its error page shows. */
export const ERROR_TITLES = {
  400: "Not understood",
  401: "Signed out",
  403: "Not allowed",
  404: "Not found",
  409: "Conflict",
  413: "Too large",
  422: "Not accepted",
  500: "Something broke",
  502: "The API refused",
  503: "Not available",
} as const;
export type ErrorStatus = keyof typeof ERROR_TITLES;

/**
 * A domain refusal's status on a console page: the API's own (src/http/errors.ts decides it), or
 * 502 for one a page has no title for.
 */
export function consoleStatusOf(code: ErrorCode): ErrorStatus {
  const status = STATUS_OF_CODE[code] as number;
  return status in ERROR_TITLES ? (status as ErrorStatus) : 502;
}
