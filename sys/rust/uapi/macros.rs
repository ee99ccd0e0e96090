//! Declaration helpers shared by the ABI modules.

/// Declares a C enumeration as a Rust enum with its C spelling and
/// description, a checked conversion from the raw value and the list of
/// all members.
macro_rules! abi_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident : $repr:ty {
            $(
                $(#[$vmeta:meta])*
                $variant:ident = $value:expr => ($cname:literal, $descr:literal)
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr($repr)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $value, )+
        }

        impl $name {
            /// Every member, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The member whose C value is `raw`, if any.
            #[inline]
            pub const fn from_raw(raw: $repr) -> Option<Self> {
                $( if raw == $value { return Some($name::$variant); } )+
                None
            }

            /// The C value.
            #[inline]
            pub const fn raw(self) -> $repr {
                self as $repr
            }

            /// The symbolic name of the C header, without its prefix.
            pub const fn name(self) -> &'static str {
                match self { $( $name::$variant => $cname, )+ }
            }

            /// The header's one-line description.
            pub const fn description(self) -> &'static str {
                match self { $( $name::$variant => $descr, )+ }
            }

            /// The member whose symbolic name is `name` (exact match).
            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|m| m.name() == name)
            }
        }

        impl TryFrom<$repr> for $name {
            type Error = $repr;
            fn try_from(raw: $repr) -> Result<Self, $repr> {
                Self::from_raw(raw).ok_or(raw)
            }
        }

        impl From<$name> for $repr {
            fn from(v: $name) -> $repr {
                v as $repr
            }
        }
    };
}
