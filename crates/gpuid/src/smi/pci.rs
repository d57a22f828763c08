//! PCI bus ids come in two spellings: the 8-hex-digit domain nvidia-smi
//! prints on physical hosts (`00000000:0A:00.0`) and the 4-digit Linux
//! sysfs form some NVML builds report (`0000:0A:00.0`). Both name the same
//! device, so records carry one canonical form and compare equal across
//! drivers.

/// Returns the canonical `DDDDDDDD:BB:DD.F` form (upper-case hex, 8-digit
/// domain), or `None` when `raw` is not a PCI address at all.
pub fn canonical_bus_id(raw: &str) -> Option<String> {
    let raw = raw.trim();
    let (domain, rest) = raw.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let domain = parse_hex(domain, 8)?;
    let bus = parse_hex(bus, 2)?;
    let device = parse_hex(device, 2)?;
    let function = parse_hex(function, 1)?;
    if device > 0x1f || function > 7 {
        return None;
    }
    Some(format!("{domain:08X}:{bus:02X}:{device:02X}.{function:X}"))
}

fn parse_hex(digits: &str, max_len: usize) -> Option<u32> {
    if digits.is_empty() || digits.len() > max_len || !digits.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::canonical_bus_id;

    #[test]
    fn both_domain_widths_name_the_same_device() {
        assert_eq!(
            canonical_bus_id("0000:07:00.0").as_deref(),
            Some("00000000:07:00.0")
        );
        assert_eq!(
            canonical_bus_id("00000000:07:00.0").as_deref(),
            Some("00000000:07:00.0")
        );
    }

    #[test]
    fn hex_digits_are_upper_cased() {
        assert_eq!(
            canonical_bus_id("0000:b2:1f.7").as_deref(),
            Some("00000000:B2:1F.7")
        );
    }

    #[test]
    fn strings_that_are_not_pci_addresses_are_rejected() {
        for raw in [
            "",
            "GPU-123",
            "0000:07:00",
            "0000:07:20.0",
            "0000:07:00.8",
            "000000000:07:00.0",
            "zz:07:00.0",
        ] {
            assert_eq!(canonical_bus_id(raw), None, "{raw:?}");
        }
    }
}
