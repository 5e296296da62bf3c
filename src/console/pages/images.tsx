/** @jsxImportSource hono/jsx */
/**
 * Images: the catalog, by name then version, with who uses each image (channels, live rollouts,
 * servers), read from each image's own answer (a page is at most PAGE images).
 */
import type { z } from "zod";
import { Image, ImageWithUsers } from "../../images/schemas";
import { qs, read, readPage } from "../api";
import { render, type View } from "../context";
import { Ago, Field, Filters, Pager, serverHref, Table } from "../ui";

const PAGE = 25;

const sizeOf = (n: number) =>
  n >= 1024 ** 3
    ? `${(n / 1024 ** 3).toFixed(2)} GiB`
    : n >= 1024 ** 2
      ? `${(n / 1024 ** 2).toFixed(1)} MiB`
      : n >= 1024
        ? `${(n / 1024).toFixed(1)} KiB`
        : `${n} B`;

const Users = ({ used }: { used: z.output<typeof ImageWithUsers>["used_by"] }) => {
  if (!used) return <span class="muted">—</span>;
  const items = [
    ...used.channels.map((c) => (
      <li>
        channel {c.fleet}/{c.agent}
      </li>
    )),
    ...used.rollouts.map((r) => (
      <li>
        rollout <a href={`/console/rollouts/${r.id}`}>{r.id.slice(0, 8)}</a> ({r.state})
      </li>
    )),
    ...used.servers.map((s) => (
      <li>
        server <a href={serverHref(s)}>{s.hostname}</a>
      </li>
    )),
  ];
  return items.length ? <ul class="small">{items}</ul> : <span class="muted">nobody</span>;
};

export async function imagesPage(v: View) {
  const q = v.c.req.query();
  const name = q.name?.trim() || undefined;
  const list = await readPage(v, Image, `/v1/images${qs({ name, limit: PAGE, cursor: q.cursor })}`);
  const details = await Promise.all(list.items.map((i) => read(v, ImageWithUsers, `/v1/images/${i.id}`)));
  return render(
    v,
    "images",
    "Images",
    <>
      <h1>Images</h1>
      <Filters
        action="/console/images"
        label="Filter images"
        fleet={v.fleet}
        clear={`/console/images${qs({ fleet: v.fleet })}`}
      >
        <Field label="Name" name="name" value={name} />
      </Filters>
      <Table
        id="images"
        caption="Catalog images"
        head={["Name", "Version", "Kind", "Digest", "Size", "State", "Used by", "Created"]}
      >
        {details.map((i) => (
          <tr>
            <td>{i.name}</td>
            <td>{i.version}</td>
            <td>{i.kind}</td>
            <td class="mono small" title={i.digest}>
              {i.digest.slice(0, 19)}…
            </td>
            <td>{sizeOf(i.size)}</td>
            <td>
              {i.state === "ready"
                ? "ready"
                : `uploading (${i.upload?.received.length ?? 0}/${i.upload?.parts ?? "?"} parts)`}
            </td>
            <td>
              <Users used={i.used_by} />
            </td>
            <td>
              <Ago at={i.created_at} />
            </td>
          </tr>
        ))}
      </Table>
      {details.length === 0 ? (
        <p>
          No image{name ? ` named ${name}` : ""} in the catalog. Add one with <code>hm images push</code>.
        </p>
      ) : null}
      <Pager base="/console/images" params={{ fleet: v.fleet, name, cursor: q.cursor }} next={list.next_cursor} />
    </>,
  );
}
