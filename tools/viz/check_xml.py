"""Checks that each file given is well-formed XML whose root is <svg>.

Usage: check_xml.py FILE.svg [MIN_ELEMENTS]
Exits 1 with the parser's line:col on malformed input.
"""
import sys
import xml.etree.ElementTree as ET


def main():
    path = sys.argv[1]
    min_elements = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        print(f"{path}: not well-formed XML: {e}")
        return 1
    if not root.tag.endswith("svg"):
        print(f"{path}: root element is {root.tag}, not svg")
        return 1
    count = sum(1 for _ in root.iter())
    if count < min_elements:
        print(f"{path}: only {count} elements")
        return 1
    print(f"{path}: well-formed svg, {count} elements")
    return 0


if __name__ == "__main__":
    sys.exit(main())
