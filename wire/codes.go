package wire

import "strconv"

// String is the code's name as in the documentation, e.g. "QueueTimeout".
func (c Code) String() string {
	switch c {
	case CodeFrameTooLarge:
		return "FrameTooLarge"
	case CodeBadVersion:
		return "BadVersion"
	case CodeBadDurability:
		return "BadDurability"
	case CodeBadFrame:
		return "BadFrame"
	case CodeQueueTimeout:
		return "QueueTimeout"
	case CodeDiskFull:
		return "DiskFull"
	case CodeShardFailed:
		return "ShardFailed"
	case CodeShuttingDown:
		return "ShuttingDown"
	case CodeInternal:
		return "Internal"
	case CodeNoHello:
		return "NoHello"
	case CodeBadMeta:
		return "BadMeta"
	case CodeNotPermitted:
		return "NotPermitted"
	case CodeOverloaded:
		return "Overloaded"
	}
	return "Code(" + strconv.Itoa(int(c)) + ")"
}

// Retryable reports whether a request refused with c may be sent again,
// later or to another daemon, with a chance of success: the refusal says
// something about the daemon's state, not about the request. DiskFull is
// retryable but only after a delay, Overloaded after the pause its
// message's retry-after hint names (ParseRetryAfter). Codes that describe
// the request itself (FrameTooLarge, BadVersion, BadDurability, BadFrame,
// NoHello, BadMeta, NotPermitted) are never retryable, and neither is
// Internal or an unknown code.
func (c Code) Retryable() bool {
	switch c {
	case CodeQueueTimeout, CodeDiskFull, CodeShardFailed, CodeShuttingDown, CodeOverloaded:
		return true
	}
	return false
}

// String is the frame type's name, e.g. "PushBatch".
func (t FrameType) String() string {
	switch t {
	case TypePush:
		return "Push"
	case TypePushBatch:
		return "PushBatch"
	case TypeAck:
		return "Ack"
	case TypeNack:
		return "Nack"
	case TypeHello:
		return "Hello"
	case TypeHelloAck:
		return "HelloAck"
	}
	return "FrameType(0x" + strconv.FormatUint(uint64(t), 16) + ")"
}

// String is the durability tier's name.
func (d Durability) String() string {
	switch d {
	case Durable:
		return "Durable"
	case Buffered:
		return "Buffered"
	case ReservedDurable:
		return "ReservedDurable"
	}
	return "Durability(0x" + strconv.FormatUint(uint64(d), 16) + ")"
}

// Valid reports whether d is a durability byte a decoder accepts (Durable,
// Buffered or the reserved 0x02).
func (d Durability) Valid() bool { return d <= ReservedDurable }

// normalise maps the reserved byte onto Durable.
func (d Durability) normalise() Durability {
	if d == ReservedDurable {
		return Durable
	}
	return d
}
