// A fake node in a process of its own, for `bench.js fake`: it sends its
// address to the parent over IPC and serves until killed.
import { FakeNode } from "./test/fake";

const node = new FakeNode();
void node.start().then((addr) => process.send?.({ addr }));
