// postject ships no types; the one call scripts/agent/build.ts makes.
declare module "postject" {
  const postject: {
    inject(file: string, resourceName: string, resourceData: Buffer, options?: { sentinelFuse?: string; machoSegmentName?: string; overwrite?: boolean }): Promise<void>;
  };
  export default postject;
}
