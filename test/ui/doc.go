// Package ui tests what an operator sees: a firn node's status page (GET /)
// rendered by a real headless browser (Debian's chromium, driven over the
// DevTools protocol), while fault injection steps the node's clock back
// beyond --max-lead and forward again.
//
// Invariants checked: the page is rendered on the server and refreshes
// itself (a <meta http-equiv=refresh>, no scripts), so an open page shows
// NOT SERVING with the step and the limit within 5 s of the fault, and
// SERVING again after it clears. A screenshot of each state is kept under
// test/artifacts/ (gitignored).
//
// Hazards: the test builds and starts the firn binary and a browser as
// child processes; both are stopped when the test ends, also on failure.
// test/run.sh installs chromium.
package ui
