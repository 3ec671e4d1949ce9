/// The constructor and length-check boilerplate shared by every
/// fixed-size header view: `new_unchecked`, `new_checked`, `check_len`,
/// `into_inner`, and the header length constant `HEADER_LEN`.
macro_rules! fixed_header_view {
    ($len:expr) => {
        /// Length of this header in bytes.
        pub const HEADER_LEN: usize = $len;

        /// A read/write view of this header at the start of a buffer.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps a buffer without checking its length: accessors panic
            /// if it is shorter than [`HEADER_LEN`]. For bytes from outside,
            /// use [`Packet::new_checked`].
            pub const fn new_unchecked(buffer: T) -> Packet<T> {
                Packet { buffer }
            }

            /// Wraps a buffer after checking that it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::Result<Packet<T>> {
                let packet = Packet::new_unchecked(buffer);
                packet.check_len()?;
                Ok(packet)
            }

            /// Checks that the buffer holds the whole header.
            pub fn check_len(&self) -> $crate::Result<()> {
                if self.buffer.as_ref().len() < HEADER_LEN {
                    Err($crate::Error::Truncated)
                } else {
                    Ok(())
                }
            }

            /// Returns the underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}
