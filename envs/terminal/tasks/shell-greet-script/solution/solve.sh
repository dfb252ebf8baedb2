#!/bin/bash
set -e
cat > greet.sh <<'EOF'
#!/bin/bash
if [ $# -eq 0 ]; then set -- world; fi
for n in "$@"; do echo "Hello, $n!"; done
EOF
chmod +x greet.sh
