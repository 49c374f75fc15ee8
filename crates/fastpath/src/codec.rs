//! Little-endian integers and length-prefixed byte strings, checked on every read.

/// A message that does not decode: too short, a length past its end, an unknown tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    Truncated,
    TooLong,
    UnknownTag(u32),
    TrailingBytes,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Truncated => write!(f, "message ends inside a field"),
            WireError::TooLong => write!(f, "field longer than the message allows"),
            WireError::UnknownTag(tag) => write!(f, "unknown tag {tag}"),
            WireError::TrailingBytes => write!(f, "bytes after the last field"),
        }
    }
}

impl std::error::Error for WireError {}

/// Appends fields to a message buffer.
pub struct Encoder<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Encoder<'a> {
    /// Starts a message in `out` (cleared first, its capacity kept).
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        out.clear();
        Encoder { out }
    }

    pub fn u8(&mut self, value: u8) -> &mut Self {
        self.out.push(value);
        self
    }

    pub fn u32(&mut self, value: u32) -> &mut Self {
        self.out.extend_from_slice(&value.to_le_bytes());
        self
    }

    pub fn i32(&mut self, value: i32) -> &mut Self {
        self.out.extend_from_slice(&value.to_le_bytes());
        self
    }

    pub fn u64(&mut self, value: u64) -> &mut Self {
        self.out.extend_from_slice(&value.to_le_bytes());
        self
    }

    pub fn i64(&mut self, value: i64) -> &mut Self {
        self.out.extend_from_slice(&value.to_le_bytes());
        self
    }

    pub fn bool(&mut self, value: bool) -> &mut Self {
        self.u8(u8::from(value))
    }

    /// Fields encoded already (by another `Encoder`), as they are.
    pub fn encoded(&mut self, fields: &[u8]) -> &mut Self {
        self.out.extend_from_slice(fields);
        self
    }

    /// A u32 length, then the bytes.
    pub fn bytes(&mut self, value: &[u8]) -> &mut Self {
        let len = u32::try_from(value.len()).expect("fields are bounded by MAX_MESSAGE_BYTES");
        self.u32(len);
        self.out.extend_from_slice(value);
        self
    }
}

/// Reads fields from a received message, in order.
pub struct Decoder<'a> {
    rest: &'a [u8],
}

impl<'a> Decoder<'a> {
    pub fn new(message: &'a [u8]) -> Self {
        Decoder { rest: message }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.rest.len() < n {
            return Err(WireError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64, WireError> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    pub fn bool(&mut self) -> Result<bool, WireError> {
        Ok(self.u8()? != 0)
    }

    /// A byte string of at most `max` bytes.
    pub fn bytes(&mut self, max: usize) -> Result<&'a [u8], WireError> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(WireError::TooLong);
        }
        self.take(len)
    }

    /// Every field was read: anything left over is a malformed message.
    pub fn finish(&self) -> Result<(), WireError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(WireError::TrailingBytes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_short_messages_are_errors() {
        let mut buf = Vec::new();
        Encoder::new(&mut buf)
            .u32(7)
            .i64(-3)
            .bytes(b"name")
            .bool(true);
        let mut decoder = Decoder::new(&buf);
        assert_eq!(decoder.u32(), Ok(7));
        assert_eq!(decoder.i64(), Ok(-3));
        assert_eq!(decoder.bytes(16), Ok(&b"name"[..]));
        assert_eq!(decoder.bool(), Ok(true));
        assert_eq!(decoder.finish(), Ok(()));
        for cut in 0..buf.len() {
            let mut short = Decoder::new(&buf[..cut]);
            let result = (|| {
                short.u32()?;
                short.i64()?;
                short.bytes(16)?;
                short.bool()
            })();
            assert_eq!(result, Err(WireError::Truncated), "cut at {cut}");
        }
        let mut bounded = Decoder::new(&buf[12..]);
        assert_eq!(bounded.bytes(3), Err(WireError::TooLong));
    }
}
