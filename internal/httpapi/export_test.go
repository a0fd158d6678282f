package httpapi

// MaxBufferedBodies is maxBuffered, for the tests that fill it.
const MaxBufferedBodies = maxBuffered
