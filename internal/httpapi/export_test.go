package httpapi

// MaxBufferedBodies, MaxLargeBodies and SmallBody are maxBuffered,
// maxLarge and smallBody, for the tests that fill them.
const (
	MaxBufferedBodies = maxBuffered
	MaxLargeBodies    = maxLarge
	SmallBody         = smallBody
)
